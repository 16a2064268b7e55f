"""An HTTP server that answers every request with one canned response, for tests of what sandboxer
does with a server that is not what it expects (an engine too old, a web server at DOCKER_HOST).

usage: canned_http.py STATUS CONTENT_TYPE BODY [UNIX_SOCKET]
Listens on UNIX_SOCKET (then creates UNIX_SOCKET.ready), or on a free loopback TCP port, which it
prints on stdout."""
import http.server
import socketserver
import sys

status, content_type, body = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()


class Canned(http.server.BaseHTTPRequestHandler):
    def answer(self):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = do_PUT = answer

    def log_message(self, *args):
        pass


class UnixServer(socketserver.UnixStreamServer):
    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)


if len(sys.argv) > 4:
    server = UnixServer(sys.argv[4], Canned)
    open(sys.argv[4] + ".ready", "w").close()
else:
    server = http.server.HTTPServer(("127.0.0.1", 0), Canned)
    print(server.server_address[1], flush=True)
server.serve_forever()
