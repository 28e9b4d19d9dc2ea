#pragma once
// Method + exact-path dispatch (HEAD served by GET routes). Unknown paths answer 404, known paths with
// another method 405 with Allow, and every exception a handler throws is
// turned into the OpenAI error envelope here, so nothing escapes to the socket.
#include <functional>
#include <string>
#include <vector>

#include "server/http_types.hpp"

namespace neuron::server {

using Handler = std::function<HttpResponse(const HttpRequest&)>;

class Router {
 public:
  void add(std::string method, std::string path, Handler handler);
  // Every path under `prefix` (e.g. "/v1/models/" for /v1/models/{id}, ids
  // may hold '/'); exact routes win. `label` names it in metrics.
  void add_prefix(std::string method, std::string prefix, std::string label, Handler handler);
  HttpResponse dispatch(const HttpRequest& request) const;
  // The path when it is a registered route, else "unmatched": a label for
  // metrics that a client cannot blow up by sending random paths.
  std::string route_label(const std::string& path) const;

 private:
  struct Route {
    std::string method, path;
    Handler handler;
    bool prefix = false;
    std::string label;
    bool matches(const std::string& p) const {
      return prefix ? p.size() > path.size() && p.compare(0, path.size(), path) == 0 : p == path;
    }
  };
  std::vector<Route> routes_;
};

}  // namespace neuron::server
