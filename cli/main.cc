// gpushare: the command-line host of the library.
//
//   gpushare version
//   gpushare policies

#include <cstring>
#include <iostream>

#include "gpushare/gpushare.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::cout << "usage: gpushare <command>\n\ncommands:\n"
                 "  version    print the library version\n"
                 "  policies   list the placement policies\n";
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "version") {
    std::cout << gpushare::Version() << "\n";
    return 0;
  }
  if (cmd == "policies") {
    for (const std::string& name : gpushare::PolicyNames()) std::cout << name << "\n";
    return 0;
  }
  std::cerr << "gpushare: unknown command '" << cmd << "' (try 'gpushare help')\n";
  return 2;
}
