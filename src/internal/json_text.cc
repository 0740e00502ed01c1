#include "src/internal/json_text.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/internal/status_macros.h"
#include "src/internal/text.h"

namespace gpushare::internal {
namespace {

using nlohmann::json;

// A SAX handler that accepts every value and keeps the first parse error:
// nlohmann reports errors to the handler instead of throwing them.
class ErrorRecorder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    if (!failed_) {
      failed_ = true;
      position_ = position;
      message_ = ex.what();
    }
    return false;
  }

  bool failed() const { return failed_; }
  std::size_t position() const { return position_; }
  const std::string& message() const { return message_; }

 private:
  bool failed_ = false;
  std::size_t position_ = 0;
  std::string message_;
};

// nlohmann's message without its "[json.exception.<kind>.<id>] " prefix and
// with a long quoted token (the "last read" of a 10 MB string) shortened.
std::string Reason(std::string message) {
  if (!message.empty() && message[0] == '[') {
    const size_t end = message.find("] ");
    if (end != std::string::npos) message.erase(0, end + 2);
  }
  const size_t open = message.find('\'');
  const size_t close = message.rfind('\'');
  if (open != std::string::npos && close > open + 1) {
    const std::string_view token(message.data() + open + 1, close - open - 1);
    if (token.size() > kMaxEchoedBytes) {
      message = absl::StrCat(message.substr(0, open + 1), Echo(token), message.substr(close));
    }
  }
  return message;
}

}  // namespace

absl::StatusOr<json> ParseJsonText(std::string_view text, std::string_view what) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!root.is_discarded()) return root;
  // Again through a handler that records the error: its position and
  // nlohmann's reason, still without exceptions.
  ErrorRecorder recorder;
  json::sax_parse(text.begin(), text.end(), &recorder);
  if (!recorder.failed()) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": not valid JSON"));
  }
  return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": ", Reason(recorder.message()),
                                                 " at byte ", recorder.position()));
}

std::string DumpJson(const json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

}  // namespace gpushare::internal
