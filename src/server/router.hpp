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
  HttpResponse dispatch(const HttpRequest& request) const;
  // The path when it is a registered route, else "unmatched": a label for
  // metrics that a client cannot blow up by sending random paths.
  std::string route_label(const std::string& path) const;

 private:
  struct Route {
    std::string method, path;
    Handler handler;
  };
  std::vector<Route> routes_;
};

}  // namespace neuron::server
