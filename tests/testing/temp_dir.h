// A folder of files for one test, removed with it.
//
//   TempDir dir;
//   std::string path = dir.Write("kube/config", text);         // Folders made as needed.
//   dir.Write("plugin.sh", "#!/bin/sh\n...", /*executable=*/true);
//   std::string back = dir.Read("kube/config");

#ifndef GPUSHARE_TESTS_TESTING_TEMP_DIR_H_
#define GPUSHARE_TESTS_TESTING_TEMP_DIR_H_

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gpushare::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpushare_test.XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  // Writes `text` to `name` (relative to the folder); returns its path.
  std::string Write(const std::string& name, const std::string& text,
                    bool executable = false) const {
    const std::string p = path_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << text;
    if (executable) chmod(p.c_str(), 0755);
    return p;
  }

  // The content of `name`; "" when it cannot be read.
  std::string Read(const std::string& name) const {
    std::ifstream in(path_ + "/" + name, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string path_;
};

}  // namespace gpushare::testing

#endif  // GPUSHARE_TESTS_TESTING_TEMP_DIR_H_
