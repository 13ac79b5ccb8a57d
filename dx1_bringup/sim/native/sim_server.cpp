// The simulator socket served natively: the SoC's Verilator model with its host side in C++.
//
// The same protocol as dx1_bringup/sim/soc_server.py (docs/link.md, "Simulator socket"), whose op
// codes, status codes, sizes and limits come from the generated drivers/include/dx1_link.h and whose
// register offsets come from drivers/include/dx1_regs.h.  Whole requests cross the socket; the clock
// runs here, so no Python is on the per-cycle path.  Each AXI4-Lite transaction takes the cycles the
// cocotb server's cocotbext-axi master takes (a cycle to pick the command up, one per handshake), so
// cycle counts and the PERF counters read the same on both servers.  Memory blocks go through the
// backdoor: the banks' arrays, which backdoor.vlt makes public, written between clock edges.
//
// Built with DX1_LINK 1 (dx1_bringup.sim.native.build) around one chip of a ring (the dx1_chip module: the SoC
// with the wire into each of its link ports), the same program serves a board of --chips N chips in a ring
// (sim:chips=N): N instances of that one model, each in a Verilator context of its own, on one clock, each
// chip's link outputs handed to its peers' wires before every rising edge (as ChipRing wires them); one
// listening socket a chip, a request on chip r's socket acting on chip r's host ports (dx1_bringup/spec/link.py,
// "Simulator socket").
//
// A board's chips may tick on several threads (--threads T, lockstep.h): each cycle, after the hand-over of
// every chip's link outputs, thread t ticks its share of the chips, so the board runs the same cycles on any
// number of threads.
//
// Usage: dx1_sim_server [--port P] [--port-file F] [--once]; with DX1_LINK also --chips N [--threads T]

#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "Vtop.h"
#include "dx1_link.h"
#include "dx1_regs.h"
#include "lockstep.h"
#include "server_socket.h"
#include "verilated.h"
#include "verilated_syms.h"

#ifndef DX1_LINK
#define DX1_LINK 0  // 1: the model is a chip of a ring (dx1_chip), served as a board of --chips N
#endif

namespace {

// Bytes of one device-memory word (one row of a bank's array) and of a page that the banks interleave.
constexpr uint32_t kWordBytes = 8;
constexpr uint32_t kPageBytes = 4096;
constexpr int kMaxBanks = 16;
constexpr int kResetHigh = 4, kResetLow = 2;
// Cycle budget of each register read that a STUCK report makes.
constexpr uint64_t kReportReadCycles = 2000;

struct Stuck {};

// One input or output of the model, whatever its C type (Verilator's CData, SData, IData or QData).
class Pin {
  public:
    Pin() = default;
    template <typename T>
    explicit Pin(T* p) : p_(p), bytes_(sizeof(T)) {}

    uint64_t get() const {
        switch (bytes_) {
            case 1: return *static_cast<const uint8_t*>(p_);
            case 2: return *static_cast<const uint16_t*>(p_);
            case 4: return *static_cast<const uint32_t*>(p_);
            default: return *static_cast<const uint64_t*>(p_);
        }
    }
    void set(uint64_t value) {
        switch (bytes_) {
            case 1: *static_cast<uint8_t*>(p_) = uint8_t(value); break;
            case 2: *static_cast<uint16_t*>(p_) = uint16_t(value); break;
            case 4: *static_cast<uint32_t*>(p_) = uint32_t(value); break;
            default: *static_cast<uint64_t*>(p_) = value; break;
        }
    }
    explicit operator bool() const { return get() != 0; }

  private:
    void* p_ = nullptr;
    size_t bytes_ = 0;
};

// One chip's host ports: the AXI4-Lite register port, the interrupt line and the unit stalls (the wrapper
// ties the memory port idle).
struct HostPins {
    Pin arvalid, arready, araddr, rvalid, rready, rdata, rresp;
    Pin awvalid, awready, awaddr, wvalid, wready, wdata, wstrb, bvalid, bready, bresp;
    Pin irq, stall_units;
};

// One Verilator model of the SoC (or of a chip of a ring) in a context of its own, so that its scope names (the
// backdoor's banks) are its own; every instance shares the one model class's code.
class Chip {
  public:
    Chip() : context_(new VerilatedContext), top_(new Vtop{context_.get()}) {
        Vtop* t = top_.get();
        HostPins& p = pins_;
        p.arvalid = Pin(&t->regs___05Farvalid), p.arready = Pin(&t->regs___05Farready);
        p.araddr = Pin(&t->regs___05Faraddr), p.rvalid = Pin(&t->regs___05Frvalid);
        p.rready = Pin(&t->regs___05Frready), p.rdata = Pin(&t->regs___05Frdata);
        p.rresp = Pin(&t->regs___05Frresp), p.awvalid = Pin(&t->regs___05Fawvalid);
        p.awready = Pin(&t->regs___05Fawready), p.awaddr = Pin(&t->regs___05Fawaddr);
        p.wvalid = Pin(&t->regs___05Fwvalid), p.wready = Pin(&t->regs___05Fwready);
        p.wdata = Pin(&t->regs___05Fwdata), p.wstrb = Pin(&t->regs___05Fwstrb);
        p.bvalid = Pin(&t->regs___05Fbvalid), p.bready = Pin(&t->regs___05Fbready);
        p.bresp = Pin(&t->regs___05Fbresp);
        p.irq = Pin(&t->irq), p.stall_units = Pin(&t->stall_units);
    }

    ~Chip() { top_->final(); }

    Vtop* top() { return top_.get(); }
    HostPins& pins() { return pins_; }

    // One clock cycle of this chip: falling edge, then the rising edge, settled after each.
    void tick() {
        top_->clk = 0;
        top_->eval();
        top_->clk = 1;
        top_->eval();
    }

  private:
    std::unique_ptr<VerilatedContext> context_;
    std::unique_ptr<Vtop> top_;
    HostPins pins_;
};

#if DX1_LINK
// The chip and port at the far end of the wire leaving link port `port` of chip `chip` (ring.py's ring_peer):
// port 0 (next) goes to port 1 of chip + 1, port 1 (previous) to port 0 of chip - 1.
int ring_peer(int chip, uint32_t port, int chips) { return port == 0 ? (chip + 1) % chips : (chip + chips - 1) % chips; }

// What link port FROM of `from` sends, into the wire to port TO of `to` (its link<TO>_peer inputs).
#define DX1_HAND(to, TO, from, FROM)                                                                            \
    do {                                                                                                      \
        (to)->link##TO##_peer___05Fup = (from)->link##FROM##_tx___05Fup;                                      \
        (to)->link##TO##_peer___05Fhears = (from)->link##FROM##_tx___05Fhears;                                \
        (to)->link##TO##_peer___05Fvalid = (from)->link##FROM##_tx___05Fvalid;                                \
        (to)->link##TO##_peer___05Ffirst = (from)->link##FROM##_tx___05Ffirst;                                \
        (to)->link##TO##_peer___05Fdata = (from)->link##FROM##_tx___05Fdata;                                  \
    } while (0)
#endif

// The model: one SoC, or a board of chips in a ring on one clock, its chips ticked on `threads` threads.
class Model {
  public:
    explicit Model(int chips, int threads = 1) : lockstep_(threads, [this](int t) { tick_share(t); }) {
        for (int i = 0; i < chips; ++i) chips_.emplace_back(new Chip);
#if DX1_LINK
        // GLOBAL.CHIP_ID: rank i of `chips`, as ChipRing's straps.
        for (int i = 0; i < chips; ++i) {
            chips_[i]->top()->chip_id = uint32_t(i) | uint32_t(chips) << DX1_GLOBAL_CHIP_ID_CHIPS_SHIFT;
        }
#endif
    }

    int chips() const { return int(chips_.size()); }
    Chip& chip(int i) { return *chips_[i]; }
    uint64_t cycles() const { return cycles_; }

    // One clock cycle of every chip.  On a board, first every chip's link outputs (settled) into its peers'
    // wires, whose first registers take them at the rising edge: nothing a chip shows depends on those inputs
    // before it, so each thread then ticks its share of the chips (on one thread, all of them in turn).
    void tick() {
#if DX1_LINK
        int n = chips();
        for (int i = 0; i < n; ++i) {
            Vtop* from = chips_[i]->top();
            DX1_HAND(chips_[ring_peer(i, 0, n)]->top(), 1, from, 0);
            DX1_HAND(chips_[ring_peer(i, 1, n)]->top(), 0, from, 1);
        }
#endif
        lockstep_.run();
        ++cycles_;
    }

    void reset() {
        for (auto& chip : chips_) {
            chip->top()->rst = 1;
            HostPins& p = chip->pins();
            p.stall_units.set(0);
            p.arvalid.set(0);
            p.awvalid.set(0);
            p.wvalid.set(0);
            p.rready.set(1);
            p.bready.set(1);
            // The cocotb server's clock starts high at time 0: its first rising edge is there.
            chip->top()->clk = 1;
            chip->top()->eval();
        }
        // The wrapper registers rst: released a cycle early, the SoC leaves reset on the cocotb server's cycle.
        for (int i = 0; i < kResetHigh - 1; ++i) tick();
        for (auto& chip : chips_) chip->top()->rst = 0;
        for (int i = 0; i < kResetLow + 1; ++i) tick();
        // cocotb counts cycles from time 0, whose edge started the clock.
        --cycles_;
    }

#if DX1_LINK
    // Cut (or mend) the wire leaving link port `port` of chip `chip` (ChipRing's cut bit 2 chip + port): the
    // far end's wire into its port 1 - port.
    void cut(int chip, uint32_t port, bool cut) {
        Vtop* far = chips_[ring_peer(chip, port, chips())]->top();
        uint32_t bit = 1u << (1 - port);
        far->cut = cut ? (far->cut | bit) : (far->cut & ~bit);
        far->eval();
    }
#endif

  private:
    // Thread t's share of a cycle: chips t n / T to (t + 1) n / T - 1.
    void tick_share(int t) {
        const int n = chips(), threads = lockstep_.threads();
        for (int i = t * n / threads; i < (t + 1) * n / threads; ++i) chips_[i]->tick();
    }

    std::vector<std::unique_ptr<Chip>> chips_;
    dx1::Lockstep lockstep_;  // after chips_: its threads stop before the chips go
    uint64_t cycles_ = 0;
};

// One chip of the model: its host ports and its memory banks.
class Soc {
  public:
    Soc(Model* model, int chip)
        : model_(model), top_(model->chip(chip).top()), pins_(&model->chip(chip).pins()), chip_(chip) {
        find_banks();
    }

    int chip() const { return chip_; }
    uint64_t cycles() const { return model_->cycles(); }
    void tick() { model_->tick(); }

    bool irq() const { return bool(pins_->irq); }
    void stall(uint32_t units) { pins_->stall_units.set(units); }
#if DX1_LINK
    void cut(uint32_t port, bool cut) { model_->cut(chip_, port, cut); }
#endif

    // AXI4-Lite read of the register at addr within budget cycles; false on an error response.
    bool read32(uint32_t addr, uint32_t* value, uint64_t budget) {
        Budget b{this, budget};
        b.tick();  // the master takes its command on the next edge
        HostPins& p = *pins_;
        p.araddr.set(addr);
        p.arvalid.set(1);
        top_->eval();
        while (true) {
            bool handshake = bool(p.arready);
            b.tick();
            if (handshake) break;
        }
        p.arvalid.set(0);
        top_->eval();
        while (true) {
            bool handshake = bool(p.rvalid);
            uint32_t data = uint32_t(p.rdata.get());
            uint32_t resp = uint32_t(p.rresp.get());
            b.tick();
            if (handshake) {
                *value = data;
                return resp == 0;
            }
        }
    }

    // AXI4-Lite write of value to the register at addr within budget cycles; false on an error response.
    bool write32(uint32_t addr, uint32_t value, uint64_t budget) {
        Budget b{this, budget};
        b.tick();
        HostPins& p = *pins_;
        p.awaddr.set(addr);
        p.awvalid.set(1);
        p.wdata.set(value);
        p.wstrb.set(0xf);
        p.wvalid.set(1);
        top_->eval();
        while (p.awvalid || p.wvalid) {
            bool aw = p.awvalid && p.awready;
            bool w = p.wvalid && p.wready;
            b.tick();
            if (aw) p.awvalid.set(0);
            if (w) p.wvalid.set(0);
            top_->eval();
        }
        while (true) {
            bool handshake = bool(p.bvalid);
            uint32_t resp = uint32_t(p.bresp.get());
            b.tick();
            if (handshake) return resp == 0;
        }
    }

    // Drop a transaction that ran out of its budget, as the cocotb server abandons it.
    void abandon() {
        pins_->arvalid.set(0);
        pins_->awvalid.set(0);
        pins_->wvalid.set(0);
        top_->eval();
    }

    // Host-port channels with valid high and ready low, as "regs.ar, ..." (the wrapper ties the memory port idle).
    std::string waiting_channels() const {
        std::vector<std::string> out;
        const HostPins& p = *pins_;
        if (p.awvalid && !p.awready) out.push_back("regs.aw");
        if (p.wvalid && !p.wready) out.push_back("regs.w");
        if (p.bvalid && !p.bready) out.push_back("regs.b");
        if (p.arvalid && !p.arready) out.push_back("regs.ar");
        if (p.rvalid && !p.rready) out.push_back("regs.r");
        std::string text;
        for (size_t i = 0; i < out.size(); ++i) text += (i ? ", " : "") + out[i];
        return text;
    }

    uint64_t mem_bytes() const { return banks_.size() * uint64_t(bank_rows_) * kWordBytes; }

    bool read_block(uint64_t addr, uint32_t n, std::string* out) const {
        if (addr + n > mem_bytes()) return false;
        out->resize(n);
        for (uint32_t i = 0; i < n;) {
            uint64_t word = word_at((addr + i) / kWordBytes);
            uint32_t offset = (addr + i) % kWordBytes;
            uint32_t take = std::min<uint32_t>(kWordBytes - offset, n - i);
            for (uint32_t k = 0; k < take; ++k) (*out)[i + k] = char(word >> (8 * (offset + k)));
            i += take;
        }
        return true;
    }

    bool write_block(uint64_t addr, const std::string& data) {
        if (addr + data.size() > mem_bytes()) return false;
        for (uint32_t i = 0; i < data.size();) {
            uint64_t index = (addr + i) / kWordBytes;
            uint32_t offset = (addr + i) % kWordBytes;
            uint32_t take = std::min<uint32_t>(kWordBytes - offset, uint32_t(data.size()) - i);
            uint64_t word = word_at(index);
            for (uint32_t k = 0; k < take; ++k) {
                uint32_t shift = 8 * (offset + k);
                word = (word & ~(uint64_t(0xff) << shift)) | (uint64_t(uint8_t(data[i + k])) << shift);
            }
            word_ref(index) = word;
            i += take;
        }
        top_->eval();  // the arrays' readers see the new words before the next edge
        return true;
    }

  private:
    // Ticks of one transaction, which throws Stuck once they pass its budget.
    struct Budget {
        Soc* soc;
        uint64_t left;
        void tick() {
            if (left == 0) throw Stuck{};
            --left;
            soc->tick();
        }
    };

    // The arrays of TOP.<soc>.memory.bank<b> (of this chip's own model), in bank order, the only public signals
    // below the top level.
    void find_banks() {
        const VerilatedScopeNameMap* scopes = top_->contextp()->scopeNameMap();
        for (int b = 0; b < kMaxBanks; ++b) {
            std::string suffix = ".memory.bank" + std::to_string(b);
            VerilatedVar* var = nullptr;
            std::string scope;
            for (const auto& entry : *scopes) {
                std::string name = entry.first;
                bool outer = scope.empty() || std::count(name.begin(), name.end(), '.') <
                                                  std::count(scope.begin(), scope.end(), '.');
                if (name.size() > suffix.size() && outer &&
                    name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
                    var = entry.second->varFind("mem");
                    if (var) scope = name;
                }
            }
            if (!var) break;
            if (var->udims() != 1 || var->entSize() != kWordBytes) {
                std::fprintf(stderr, "dx1_sim_server: %s.mem is not an array of 64-bit words\n", scope.c_str());
                std::exit(1);
            }
            banks_.push_back(static_cast<uint64_t*>(var->datap()));
            bank_rows_ = var->elements(1);
        }
        if (banks_.empty()) {
            std::fprintf(stderr, "dx1_sim_server: no public TOP.<soc>.memory.bank0.mem (backdoor.vlt)\n");
            std::exit(1);
        }
    }

    // Pages of kPageBytes go round the banks in turn (dx1_bringup.sim.backdoor.word_location).
    uint64_t& word_ref(uint64_t index) const {
        uint64_t page_words = kPageBytes / kWordBytes;
        uint64_t page = index / page_words, offset = index % page_words;
        return banks_[page % banks_.size()][page / banks_.size() * page_words + offset];
    }
    uint64_t word_at(uint64_t index) const { return word_ref(index); }

    Model* model_;
    Vtop* top_;
    HostPins* pins_;
    int chip_;
    std::vector<uint64_t*> banks_;
    uint32_t bank_rows_ = 0;
};

bool recv_exact(int fd, void* buf, size_t n) {
    char* p = static_cast<char*>(buf);
    while (n) {
        ssize_t got = recv(fd, p, n, 0);
        if (got <= 0) return false;
        p += got;
        n -= size_t(got);
    }
    return true;
}

void send_all(int fd, const std::string& data) {
    const char* p = data.data();
    size_t n = data.size();
    while (n) {
        ssize_t sent = send(fd, p, n, MSG_NOSIGNAL);
        if (sent <= 0) return;  // the client went away; the next recv says so
        p += sent;
        n -= size_t(sent);
    }
}

uint32_t le32(const unsigned char* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }

std::string le(uint64_t value, int bytes) {
    std::string out(bytes, '\0');
    for (int i = 0; i < bytes; ++i) out[i] = char(value >> (8 * i));
    return out;
}

std::string hex(uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%x", value);
    return text;
}

class Server {
  public:
    explicit Server(Soc* soc) : soc_(soc) {}

    // What became of the connection after one request.
    enum class After { kMore, kEnded, kStop, kWaiting };

    // Serve one request of the client on fd: kMore, kEnded (it closed the connection, or sent CLOSE 0) or kStop
    // (CLOSE 1: it asks the server to stop).  With a non-null `wait`, a WAIT_IRQ that would tick is not served
    // here: kWaiting, with its cycle budget in *wait, and the caller ticks the board and calls end_wait.
    After serve_one(int fd, uint64_t* wait = nullptr) {
        unsigned char header[DX1_SIM_REQUEST_BYTES];
        if (!recv_exact(fd, header, sizeof header)) return After::kEnded;
        uint32_t op = header[0], addr = le32(header + 1), n = le32(header + 5);
        if (op == DX1_SIM_CLOSE) {
            send_all(fd, std::string(1, char(DX1_SIM_OK)) + le(0, 4));
            return n == 0 ? After::kEnded : After::kStop;
        }
        std::string payload;
        if (op == DX1_SIM_WRITE_BLOCK) {
            if (n > DX1_SIM_MAX_BLOCK) {
                answer(fd, DX1_SIM_BAD_REQUEST, "write_block of " + std::to_string(n) + " bytes is more than " +
                                                    std::to_string(DX1_SIM_MAX_BLOCK));
                return After::kEnded;  // its payload cannot be skipped safely: end the connection
            }
            payload.resize(n);
            if (n && !recv_exact(fd, &payload[0], n)) return After::kEnded;
        }
        if (wait && op == DX1_SIM_WAIT_IRQ && !soc_->irq()) {
            *wait = std::max<uint32_t>(1, n);
            return After::kWaiting;
        }
        std::string data;
        uint8_t status = handle(op, addr, n, payload, &data);
        answer(fd, status, data);
        return After::kMore;
    }

    // Serve one client; false when it asked the server to stop.
    bool serve(int fd) {
        while (true) {
            After after = serve_one(fd);
            if (after != After::kMore) return after == After::kEnded;
        }
    }

    // Answer the WAIT_IRQ that serve_one left waiting: the interrupt line now.
    void end_wait(int fd) { answer(fd, DX1_SIM_OK, std::string(1, char(soc_->irq()))); }

  private:
    void answer(int fd, uint8_t status, const std::string& data) {
        send_all(fd, std::string(1, char(status)) + le(data.size(), 4) + data);
    }

    uint64_t budget(uint32_t bytes) const {
        return fixed_budget_ ? fixed_budget_ : DX1_SIM_REQUEST_CYCLES + uint64_t(DX1_SIM_CYCLES_PER_BYTE) * bytes;
    }

    std::string queue_state() {
        std::string out;
        const struct { const char* name; uint32_t offset; } regs[] = {
            {"STATUS", DX1_QUEUE_STATUS}, {"HEAD", DX1_QUEUE_HEAD}, {"TAIL", DX1_QUEUE_TAIL}};
        uint32_t caps = 0;
        try {
            soc_->read32(DX1_GLOBAL_BASE + DX1_GLOBAL_CAPS, &caps, kReportReadCycles);
        } catch (Stuck&) {
            soc_->abandon();
            return "CAPS unreadable";
        }
        uint32_t queues = (caps & DX1_GLOBAL_CAPS_TILES_MASK) >> DX1_GLOBAL_CAPS_TILES_SHIFT;
        for (uint32_t q = 0; q < queues; ++q) {
            out += (q ? "; QUEUE" : "QUEUE") + std::to_string(q);
            for (const auto& reg : regs) {
                uint32_t value = 0;
                try {
                    soc_->read32(DX1_QUEUE_BASE(q) + reg.offset, &value, kReportReadCycles);
                    out += std::string(" ") + reg.name + "=" + hex(value);
                } catch (Stuck&) {
                    soc_->abandon();
                    out += std::string(" ") + reg.name + " unreadable";
                }
            }
        }
        return out;
    }

    uint8_t stuck(const std::string& what, uint64_t cycles, std::string* data) {
        std::string channels = soc_->waiting_channels();
        soc_->abandon();
        std::string waiting = channels.empty()
                                  ? "no host-port channel has valid without ready (the device owes a response)"
                                  : channels + " valid without ready";
        *data = what + " did not finish within " + std::to_string(cycles) + " cycles: " + waiting + "; " +
                queue_state();
        return DX1_SIM_STUCK;
    }

    uint8_t handle(uint32_t op, uint32_t addr, uint32_t n, const std::string& payload, std::string* data) {
        switch (op) {
            case DX1_SIM_READ32: {
                uint32_t value = 0;
                try {
                    if (!soc_->read32(addr, &value, budget(4))) return DX1_SIM_BUS_ERROR;
                } catch (Stuck&) {
                    return stuck("read32 at " + hex(addr), budget(4), data);
                }
                *data = le(value, 4);
                return DX1_SIM_OK;
            }
            case DX1_SIM_WRITE32:
                try {
                    return soc_->write32(addr, n, budget(4)) ? DX1_SIM_OK : DX1_SIM_BUS_ERROR;
                } catch (Stuck&) {
                    return stuck("write32 at " + hex(addr), budget(4), data);
                }
            case DX1_SIM_READ_BLOCK:
                if (n > DX1_SIM_MAX_BLOCK) {
                    *data = "read_block of " + std::to_string(n) + " bytes is more than " +
                            std::to_string(DX1_SIM_MAX_BLOCK);
                    return DX1_SIM_BAD_REQUEST;
                }
                return soc_->read_block(addr, n, data) ? DX1_SIM_OK : DX1_SIM_BUS_ERROR;
            case DX1_SIM_WRITE_BLOCK:
                return soc_->write_block(addr, payload) ? DX1_SIM_OK : DX1_SIM_BUS_ERROR;
            case DX1_SIM_WAIT_IRQ:
                if (!soc_->irq()) {
                    for (uint32_t i = 0; i < std::max<uint32_t>(1, n) && !soc_->irq(); ++i) soc_->tick();
                }
                *data = std::string(1, char(soc_->irq()));
                return DX1_SIM_OK;
            case DX1_SIM_CYCLES:
                *data = le(soc_->cycles(), 8);
                return DX1_SIM_OK;
            case DX1_SIM_STALL:
                soc_->stall(n);
                return DX1_SIM_OK;
            case DX1_SIM_BUDGET:
                fixed_budget_ = n;
                return DX1_SIM_OK;
            case DX1_SIM_CUT:
#if DX1_LINK
                if (addr > 1) {
                    *data = "cut: link port " + std::to_string(addr) + " does not exist (ports 0 and 1)";
                    return DX1_SIM_BAD_REQUEST;
                }
                soc_->cut(addr, n != 0);
                return DX1_SIM_OK;
#else
                *data = "cut: a single SoC has no link wires (only a board of chips, sim:chips=N, has)";
                return DX1_SIM_BAD_REQUEST;
#endif
            default:
                *data = "unknown op " + std::to_string(op);
                return DX1_SIM_BAD_REQUEST;
        }
    }

    Soc* soc_;
    uint64_t fixed_budget_ = 0;
};

// A board of chips: one listening socket a chip, their connections served a request at a time in turn.  A
// chip's WAIT_IRQ does not hold the board: the board ticks for every waiting chip at once, kWaitSlice cycles
// at a time, and serves any other chip's request that arrived in between (a rank's submit is not kept waiting
// while its peer's wait runs the clock).  It stops once every chip has had a client and none is left, when
// each asked it to (CLOSE 1) or with --once.
constexpr int kWaitSlice = 32;

// Whether a waiting chip's interrupt is up (its WAIT_IRQ is answered before the next tick).
bool wait_over(const std::vector<std::unique_ptr<Soc>>& socs, const std::vector<uint64_t>& wait_left) {
    for (size_t chip = 0; chip < socs.size(); ++chip) {
        if (wait_left[chip] && socs[chip]->irq()) return true;
    }
    return false;
}

void serve_board(Model* model, const dx1::ServerArgs& args, const char* program) {
    const int chips = model->chips();
    std::vector<std::unique_ptr<Soc>> socs;
    std::vector<std::unique_ptr<Server>> servers;
    for (int chip = 0; chip < chips; ++chip) {
        socs.emplace_back(new Soc{model, chip});
        servers.emplace_back(new Server{socs.back().get()});
    }
    std::vector<int> listeners = dx1::listen_on_many(chips, args.port, args.port_file, program,
                                                     "dx1 sim serving a board of chips");
    std::vector<int> conns(chips, -1);
    std::vector<bool> seen(chips, false), stop(chips, false);
    std::vector<uint64_t> wait_left(chips, 0);  // 1 + cycles left of a chip's WAIT_IRQ; 0: not waiting
    int next = 0;  // where the next look starts, so that no chip's client waits behind another's for ever
    while (true) {
        bool all_done = true, waiting = false;
        for (int chip = 0; chip < chips; ++chip) {
            all_done = all_done && seen[chip] && conns[chip] < 0 && (args.once || stop[chip]);
            waiting = waiting || wait_left[chip] > 0;
        }
        if (all_done) break;
        std::vector<pollfd> fds(chips);
        for (int chip = 0; chip < chips; ++chip) {
            int fd = conns[chip] >= 0 ? conns[chip] : listeners[chip];
            fds[chip] = {wait_left[chip] ? -1 : fd, POLLIN, 0};  // a waiting client sends nothing until answered
        }
        if (poll(fds.data(), fds.size(), waiting ? 0 : -1) < 0) continue;
        bool served = false;
        int first = next;
        for (int k = 0; k < chips; ++k) {
            int chip = (first + k) % chips;
            if (!(fds[chip].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            served = true;
            if (conns[chip] < 0) {
                int conn = accept(listeners[chip], nullptr, nullptr);
                if (conn < 0) continue;
                int one = 1;
                setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                conns[chip] = conn;
                seen[chip] = true;
                stop[chip] = false;
                continue;
            }
            uint64_t wait = 0;
            Server::After after = servers[chip]->serve_one(conns[chip], &wait);
            if (after == Server::After::kWaiting) wait_left[chip] = wait + 1;
            if (after == Server::After::kEnded || after == Server::After::kStop) {
                close(conns[chip]);
                conns[chip] = -1;
                stop[chip] = after == Server::After::kStop;
            }
            next = (chip + 1) % chips;
        }
        if (served || !waiting) continue;
        // Nothing else to serve: run the board for the waiting chips, then answer those whose wait is over.
        for (int t = 0; t < kWaitSlice && !wait_over(socs, wait_left); ++t) {
            model->tick();
            for (uint64_t& left : wait_left) left -= left > 1;  // 1: the budget is spent
            bool spent = false;
            for (uint64_t left : wait_left) spent = spent || left == 1;
            if (spent) break;
        }
        for (int chip = 0; chip < chips; ++chip) {
            if (wait_left[chip] && (wait_left[chip] == 1 || socs[chip]->irq())) {
                servers[chip]->end_wait(conns[chip]);
                wait_left[chip] = 0;
            }
        }
    }
    for (int fd : listeners) close(fd);
}

}  // namespace

int main(int argc, char** argv) {
    dx1::ServerArgs args = dx1::parse_server_args(argc, argv, DX1_LINK);
#if DX1_LINK
    // GLOBAL.CHIP_ID holds the number of chips in a byte.
    constexpr int kMaxChips = DX1_GLOBAL_CHIP_ID_CHIPS_MASK >> DX1_GLOBAL_CHIP_ID_CHIPS_SHIFT;
    if (args.chips < 2 || args.chips > kMaxChips) {
        std::fprintf(stderr, "%s: a board has --chips 2 to %d, not %d\n", argv[0], kMaxChips, args.chips);
        return 2;
    }
    if (args.threads < 1 || args.threads > args.chips) {
        std::fprintf(stderr, "%s: a board of %d chips ticks on --threads 1 to %d, not %d\n", argv[0], args.chips,
                     args.chips, args.threads);
        return 2;
    }
    Model model{args.chips, args.threads};
    model.reset();
    serve_board(&model, args, argv[0]);
    return 0;
#else
    Model model{1};
    model.reset();
    Soc soc{&model, 0};
    Server server{&soc};
    int listener = dx1::listen_on(args.port, args.port_file, argv[0], "dx1 sim serving");
    while (true) {
        int conn = accept(listener, nullptr, nullptr);
        if (conn < 0) continue;
        int one = 1;
        setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        bool keep_going = server.serve(conn);
        close(conn);
        if (args.once || !keep_going) break;
    }
    close(listener);
    return 0;
#endif
}
