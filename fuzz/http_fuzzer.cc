// The extender's HTTP handling: bytes go into a Boost.Beast request_parser
// with the server's limits (extender/server.h ServerLimits: body and header
// sizes), as the server's sessions read them, and every complete request
// (up to kMaxRequests on one keep-alive connection) is routed by
// extender::Route() to an Extender on the fixture of fuzz/extender_fixture.h.
// Properties:
//  - parsing and routing never throw or crash;
//  - a reply is 200, 400, 404 or 405 (no 500: the extender's methods fail
//    only with InvalidArgument or NotFound) with a JSON body;
//  - after every request the scheduler's CheckInvariants() holds, and a
//    request answered 400, 404 or 405 changed nothing.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>

#include "extender/server.h"
#include "fuzz/extender_fixture.h"
#include "fuzz/fuzz_check.h"
#include "nlohmann/json.hpp"

namespace {

namespace http = boost::beast::http;

constexpr int kMaxRequests = 8;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpushare::fuzz::ExtenderFixture fixture;
  const gpushare::extender::ServerLimits limits;
  size_t pos = 0;
  for (int n = 0; n < kMaxRequests && pos < size; ++n) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(limits.max_body_bytes);
    parser.header_limit(limits.max_header_bytes);
    parser.eager(true);
    boost::beast::error_code ec;
    while (!parser.is_done()) {
      const size_t used = parser.put(boost::asio::const_buffer(data + pos, size - pos), ec);
      pos += used;
      if (ec == http::error::need_more) {
        // Everything left was offered: the connection ends here.
        ec = {};
        parser.put_eof(ec);
        break;
      }
      if (ec || used == 0) break;
    }
    if (ec || !parser.is_done()) break;  // The server closes the connection.

    const http::request<http::string_body>& req = parser.get();
    const std::string target(req.target());
    const std::string what = std::string(req.method_string()) + " " + target + " " + req.body();
    const std::string before = gpushare::fuzz::State(*fixture.scheduler);
    const gpushare::extender::Reply reply =
        gpushare::extender::Route(*fixture.extender, req.method(), target, req.body());
    const unsigned status = static_cast<unsigned>(reply.status);
    FUZZ_CHECK(status == 200 || status == 400 || status == 404 || status == 405,
               std::to_string(status) + " for " + what + ": " + reply.body);
    FUZZ_CHECK(!nlohmann::json::parse(reply.body, nullptr, false).is_discarded(),
               "reply is not JSON: " + reply.body);
    FUZZ_CHECK_OK(fixture.scheduler->CheckInvariants(), "after " + what);
    if (status != 200) {
      FUZZ_CHECK(gpushare::fuzz::State(*fixture.scheduler) == before,
                 what + " was answered " + std::to_string(status) + " but changed the state");
    }
    if (!req.keep_alive()) break;
  }
  return 0;
}
