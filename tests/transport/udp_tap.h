#pragma once
// A UDP socket on loopback that records every datagram sent to it (a wire tap) and, given a
// port, passes each on there unless `drop` says otherwise: a wire between two endpoints that a
// test can read, replay from, or make lossy. Its own thread; stopped and joined by the
// destructor.
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dtrain::testing {

class UdpTap {
 public:
  using Drop = std::function<bool(const uint8_t* datagram, size_t len)>;

  explicit UdpTap(uint16_t forward_port = 0, Drop drop = nullptr)
      : socket_(io_), forward_port_(forward_port), drop_(std::move(drop)) {
    socket_.open(asio::ip::udp::v4());
    asio::error_code ec;
    socket_.set_option(asio::socket_base::receive_buffer_size(8 << 20), ec);
    socket_.bind({asio::ip::make_address("127.0.0.1"), 0});
    socket_.non_blocking(true);
    thread_ = std::thread([this] { run(); });
  }
  ~UdpTap() {
    stop_ = true;
    thread_.join();
  }
  uint16_t port() const { return socket_.local_endpoint().port(); }
  std::vector<std::vector<uint8_t>> captured() {
    std::lock_guard<std::mutex> lock(mutex_);
    return captured_;
  }
  // Sends the bytes from this tap's socket to a port on loopback.
  void replay(const std::vector<uint8_t>& bytes, uint16_t port) {
    std::lock_guard<std::mutex> lock(mutex_);
    socket_.send_to(asio::buffer(bytes), {asio::ip::make_address("127.0.0.1"), port});
  }

 private:
  void run() {
    std::vector<uint8_t> buffer(65536);
    while (!stop_) {
      asio::ip::udp::endpoint from;
      asio::error_code ec;
      const size_t n = socket_.receive_from(asio::buffer(buffer), from, 0, ec);
      if (ec) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      captured_.emplace_back(buffer.begin(), buffer.begin() + n);
      if (forward_port_ && !(drop_ && drop_(buffer.data(), n)))
        socket_.send_to(asio::buffer(buffer.data(), n),
                        {asio::ip::make_address("127.0.0.1"), forward_port_}, 0, ec);
    }
  }
  asio::io_context io_;
  asio::ip::udp::socket socket_;
  uint16_t forward_port_;
  Drop drop_;
  std::mutex mutex_;
  std::vector<std::vector<uint8_t>> captured_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dtrain::testing
