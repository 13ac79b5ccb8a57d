// The simulated board served natively: the board's Verilator model (SoC + UART bridge) with its UART
// pins bridged to a loopback TCP socket in C++.
//
// The same service as dx1_bringup/sim/board_server.py (docs/link.md, "Simulated board"): only bytes cross
// the socket, so the serial transport cannot tell it from a cable.  The line runs at kClocksPerBit board
// clocks a bit, 8N1, as cocotbext-uart's UartSource and UartSink drive and sample it there; here the bits
// are shifted in C++, so no Python is on the per-bit path.  The board runs freely while a client is
// connected, as hardware does, looking at the socket every kChunkCycles; after kIdleChunks quiet chunks it
// waits on the socket in wall-clock time instead, so an idle server does not spin.
//
// Environment: DX1_FAULT_RATE (line faults on both directions, as dx1_bringup.faults.LineFaults.uniform:
// each byte has a bit flipped with probability 1 - (1 - rate)^8, else is dropped or delivered twice with
// probability rate each) and DX1_FAULT_SEED (the host-to-board direction's seed; the other direction uses
// seed + 1).
//
// Usage: dx1_board_server [--port P] [--port-file F] [--once]

#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <string>

#include "Vtop.h"
#include "server_socket.h"
#include "verilated.h"

namespace {

// Board clocks per bit: the fastest line the bridge samples reliably (6.25 Mbaud at 50 MHz).
constexpr int kClocksPerBit = 8;
// Cycles between looks at the socket (about one byte time on the line), and quiet chunks before waiting.
constexpr int kChunkCycles = 200;
constexpr int kIdleChunks = 2000;
constexpr int kIdleWaitMs = 50;
constexpr int kResetHigh = 4, kResetLow = 2;

// Faults of one direction of the line, drawn from a seeded generator so that a failure replays.
class LineFaults {
  public:
    LineFaults(double rate, uint64_t seed)
        : rate_(rate), p_flip_(1.0 - std::pow(1.0 - rate, 8)), rng_(seed) {}

    // data as the faulty line delivers it.
    std::string apply(const std::string& data) {
        if (rate_ == 0) return data;
        std::string out;
        std::uniform_real_distribution<double> uniform(0.0, 1.0);
        std::uniform_int_distribution<int> bit(0, 7);
        for (char b : data) {
            double r = uniform(rng_);
            if (r < p_flip_) {
                ++flipped;
                out += char(b ^ (1 << bit(rng_)));
            } else if (r < p_flip_ + rate_) {
                ++dropped;
            } else if (r < p_flip_ + 2 * rate_) {
                ++duplicated;
                out += b;
                out += b;
            } else {
                out += b;
            }
        }
        return out;
    }

    uint64_t flipped = 0, dropped = 0, duplicated = 0;

  private:
    double rate_, p_flip_;
    std::mt19937_64 rng_;
};

// The board and both ends of its line: bytes in are shifted onto uart_rx, uart_tx is sampled into bytes.
class Board {
  public:
    explicit Board(VerilatedContext* context) : top_(new Vtop{context}) {}

    ~Board() { top_->final(); }

    void reset() {
        top_->uart_rx = 1;
        top_->rst = 1;
        top_->clk = 1;
        top_->eval();
        // The wrapper registers rst: released a cycle early, the board leaves reset after kResetLow cycles.
        for (int i = 0; i < kResetHigh - 1; ++i) tick();
        top_->rst = 0;
        for (int i = 0; i < kResetLow + 1; ++i) tick();
    }

    void send(const std::string& bytes) { to_board_.insert(to_board_.end(), bytes.begin(), bytes.end()); }

    // Bytes the board sent since the last call.
    std::string take_received() {
        std::string out;
        out.swap(received_);
        return out;
    }

    // Nothing queued or on the wire in either direction.
    bool line_idle() const { return to_board_.empty() && tx_bit_ < 0 && rx_bit_ < 0; }

    void run(int cycles) {
        for (int i = 0; i < cycles; ++i) {
            drive_rx();
            tick();
            sample_tx();
        }
    }

  private:
    void tick() {
        top_->clk = 0;
        top_->eval();
        top_->clk = 1;
        top_->eval();
    }

    // Host to board: start bit, eight data bits LSB first, stop bit, each kClocksPerBit cycles.
    void drive_rx() {
        if (tx_bit_ < 0) {
            if (to_board_.empty()) return;
            tx_byte_ = uint8_t(to_board_.front());
            to_board_.pop_front();
            tx_bit_ = 0;
            tx_clock_ = 0;
        }
        top_->uart_rx = tx_bit_ == 0 ? 0 : tx_bit_ <= 8 ? (tx_byte_ >> (tx_bit_ - 1)) & 1 : 1;
        if (++tx_clock_ == kClocksPerBit) {
            tx_clock_ = 0;
            if (++tx_bit_ == 10) tx_bit_ = -1;
        }
    }

    // Board to host: a falling edge starts a frame, each bit is sampled in its middle; a frame whose stop bit
    // is low is a framing error and is dropped, as a UART receiver drops it.
    void sample_tx() {
        int level = top_->uart_tx;
        if (rx_bit_ < 0) {
            if (level == 0) {
                rx_bit_ = 0;
                rx_clock_ = 1;
                rx_byte_ = 0;
            }
            return;
        }
        if (++rx_clock_ != kClocksPerBit / 2 + kClocksPerBit * rx_bit_) return;
        if (rx_bit_ == 0 && level != 0) {
            rx_bit_ = -1;  // a glitch, not a start bit
            return;
        }
        if (rx_bit_ >= 1 && rx_bit_ <= 8) rx_byte_ |= level << (rx_bit_ - 1);
        if (rx_bit_ == 9) {
            if (level == 1) received_ += char(rx_byte_);
            rx_bit_ = -1;
            return;
        }
        ++rx_bit_;
    }

    std::unique_ptr<Vtop> top_;
    std::deque<char> to_board_;
    std::string received_;
    int tx_bit_ = -1, tx_clock_ = 0;
    uint8_t tx_byte_ = 0;
    int rx_bit_ = -1, rx_clock_ = 0;
    uint8_t rx_byte_ = 0;
};

bool send_all(int fd, const std::string& data) {
    const char* p = data.data();
    size_t n = data.size();
    while (n) {
        ssize_t sent = send(fd, p, n, MSG_NOSIGNAL);
        if (sent <= 0) return false;
        p += sent;
        n -= size_t(sent);
    }
    return true;
}

// Serve one client until it closes the connection.
void serve(int fd, Board* board, LineFaults* to_board, LineFaults* to_host) {
    int quiet = 0;
    char buffer[1 << 16];
    while (true) {
        ssize_t got = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return;
        if (got > 0) board->send(to_board->apply(std::string(buffer, size_t(got))));
        std::string out = board->take_received();
        if (!out.empty() && !send_all(fd, to_host->apply(out))) return;
        quiet = (got > 0 || !out.empty() || !board->line_idle()) ? 0 : quiet + 1;
        if (quiet > kIdleChunks) {
            pollfd wait{fd, POLLIN, 0};
            poll(&wait, 1, kIdleWaitMs);
        }
        board->run(kChunkCycles);
    }
}

double env_double(const char* name, double fallback) {
    const char* text = std::getenv(name);
    return text && *text ? std::atof(text) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
    dx1::ServerArgs args = dx1::parse_server_args(argc, argv);
    double rate = env_double("DX1_FAULT_RATE", 0.0);
    uint64_t seed = uint64_t(env_double("DX1_FAULT_SEED", 1));
    if (!(rate >= 0 && rate < 0.5)) {
        std::fprintf(stderr, "%s: DX1_FAULT_RATE must be from 0 to 0.5, not %g\n", argv[0], rate);
        return 2;
    }
    auto context = std::make_unique<VerilatedContext>();
    Board board{context.get()};
    board.reset();
    LineFaults to_board{rate, seed}, to_host{rate, seed + 1};
    int listener = dx1::listen_on(args.port, args.port_file, argv[0], "dx1 simulated board: UART served");
    while (true) {
        int conn = accept(listener, nullptr, nullptr);
        if (conn < 0) continue;
        int one = 1;
        setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        serve(conn, &board, &to_board, &to_host);
        close(conn);
        std::fprintf(stderr, "client gone; faults injected: %llu bits flipped, %llu bytes dropped, %llu duplicated\n",
                     (unsigned long long)(to_board.flipped + to_host.flipped),
                     (unsigned long long)(to_board.dropped + to_host.dropped),
                     (unsigned long long)(to_board.duplicated + to_host.duplicated));
        if (args.once) break;
    }
    close(listener);
    return 0;
}
