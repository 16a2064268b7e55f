// Whether an exposed port answers (`ready: {port}`, docs/ports.md): the TCP check from this machine
// through a relay that accepts for the service behind it, and the check of a cloud's public URL.
#include <arpa/inet.h>
#include <atomic>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/ports.hpp>
#include <sandboxer/readiness.hpp>

namespace sandboxer {
namespace {

using namespace std::chrono_literals;

// A TCP listener on 127.0.0.1 whose accepted connections are either held open or closed at once,
// as docker-proxy closes them while nothing listens in the container.
class HeldOrClosedListener {
public:
  explicit HeldOrClosedListener(bool close_at_once) : m_close(close_at_once) {
    m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    EXPECT_EQ(::bind(m_fd, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(::listen(m_fd, 4), 0);
    ::getsockname(m_fd, reinterpret_cast<sockaddr*>(&address), &length);
    m_port = ntohs(address.sin_port);
    m_thread = std::thread([this] {
      const int client = ::accept(m_fd, nullptr, nullptr);
      if (client < 0) {
        return;
      }
      if (m_close) {
        ::close(client);
        return;
      }
      while (!m_stop) {
        std::this_thread::sleep_for(10ms);
      }
      ::close(client);
    });
  }
  ~HeldOrClosedListener() {
    m_stop = true;
    ::shutdown(m_fd, SHUT_RDWR);
    m_thread.join();
    ::close(m_fd);
  }
  int port() const { return m_port; }

private:
  bool m_close;
  int m_fd = -1;
  int m_port = 0;
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

TEST(TcpAnswers, AServiceThatKeepsTheConnectionAnswers) {
  HeldOrClosedListener service(false);
  EXPECT_TRUE(tcp_answers("127.0.0.1", service.port(), 1s));
}

TEST(TcpAnswers, ARelayThatClosesAtOnceDoesNotAnswer) {
  HeldOrClosedListener relay(true);
  EXPECT_FALSE(tcp_answers("127.0.0.1", relay.port(), 1s));
}

TEST(TcpAnswers, NothingListeningDoesNotAnswer) {
  int port = 0;
  {
    HeldOrClosedListener gone(true);
    port = gone.port();
  }
  EXPECT_FALSE(tcp_answers("127.0.0.1", port, 500ms));
}

// A transport that answers one status (or throws), and keeps the request it was sent.
class OneStatusTransport : public http::Transport {
public:
  explicit OneStatusTransport(long status, bool fail = false) : m_status(status), m_fail(fail) {}
  http::Response send(const http::Request& request) override {
    sent = request;
    if (m_fail) {
      throw DriverError(DriverError::Kind::unavailable, "connection refused");
    }
    http::Response response;
    response.status = m_status;
    return response;
  }
  http::Request sent;

private:
  long m_status;
  bool m_fail;
};

TEST(UrlAnswers, AProxysOwnGatewayErrorsAreNoAnswerAndAnythingElseIs) {
  for (long status : {200L, 204L, 301L, 401L, 404L, 500L}) {
    OneStatusTransport transport(status);
    EXPECT_TRUE(url_answers(transport, "https://8080-abc.e2b.app", 2s)) << status;
  }
  for (long status : {502L, 503L, 504L}) {
    OneStatusTransport transport(status);
    EXPECT_FALSE(url_answers(transport, "https://8080-abc.e2b.app", 2s)) << status;
  }
}

TEST(UrlAnswers, IsAGetOfTheUrlBoundedByTheTimeout) {
  OneStatusTransport transport(200);
  ASSERT_TRUE(url_answers(transport, "https://8080-abc.e2b.app", 1500ms));
  EXPECT_EQ(transport.sent.method, "GET");
  EXPECT_EQ(transport.sent.url, "https://8080-abc.e2b.app");
  EXPECT_EQ(transport.sent.timeout, 1500ms);
  EXPECT_LE(transport.sent.connect_timeout, 1500ms);
}

TEST(UrlAnswers, AConnectionThatFailsIsNoAnswer) {
  OneStatusTransport transport(0, true);
  EXPECT_FALSE(url_answers(transport, "https://8080-abc.e2b.app", 1s));
}

} // namespace
} // namespace sandboxer
