// The listening side that both native servers share: their command line and their loopback listener.
//
// Usage of either server: PROGRAM [--port P] [--port-file F] [--once] (the board of chips also --chips N
// [--threads T]).
// Port 0 picks a free port; the port file gets the port chosen (a board of chips: one a chip, space-separated),
// written whole and then renamed so that a reader never sees part of it.

#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace dx1 {

struct ServerArgs {
    int port = 0;
    const char* port_file = nullptr;
    bool once = false;
    int chips = 0;    // --chips N: how many chips the board has (0: not given)
    int threads = 1;  // --threads T: how many threads tick the board's chips
};

// The options of argv (--chips and --threads only if `chips` says the program takes them); exits with status 2 and the usage on
// anything else.
inline ServerArgs parse_server_args(int argc, char** argv, bool chips = false) {
    ServerArgs args;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--port" && i + 1 < argc) {
            args.port = std::atoi(argv[++i]);
        } else if (arg == "--port-file" && i + 1 < argc) {
            args.port_file = argv[++i];
        } else if (arg == "--once") {
            args.once = true;
        } else if (chips && arg == "--chips" && i + 1 < argc) {
            args.chips = std::atoi(argv[++i]);
        } else if (chips && arg == "--threads" && i + 1 < argc) {
            args.threads = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: %s [--port P] [--port-file F] [--once]%s\n", argv[0],
                         chips ? " --chips N [--threads T]" : "");
            std::exit(2);
        }
    }
    return args;
}

// A socket listening on 127.0.0.1:port (0: a free one); its port in *chosen.  Exits with status 1 when it
// cannot listen.
inline int listen_socket(int port, const char* program, int* chosen) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(uint16_t(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(fd, 1) != 0) {
        std::fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d: ", program, port);
        std::perror(nullptr);
        std::exit(1);
    }
    socklen_t length = sizeof address;
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    *chosen = ntohs(address.sin_port);
    return fd;
}

// count sockets listening on 127.0.0.1: the first on port (0: a free one), the others on free ports (or on
// port + i when port is not 0); their ports written to port_file when given, space-separated, and printed as
// "<banner> on 127.0.0.1:PORT[ PORT...]".  Exits with status 1 when it cannot listen.
inline std::vector<int> listen_on_many(int count, int port, const char* port_file, const char* program,
                                       const char* banner) {
    std::vector<int> fds;
    std::string ports;
    for (int i = 0; i < count; ++i) {
        int chosen = 0;
        fds.push_back(listen_socket(port ? port + i : 0, program, &chosen));
        ports += (i ? " " : "") + std::to_string(chosen);
    }
    if (port_file) {
        std::string tmp = std::string(port_file) + ".tmp";
        FILE* f = std::fopen(tmp.c_str(), "w");
        if (!f || std::fprintf(f, "%s", ports.c_str()) < 0 || std::fclose(f) != 0 ||
            std::rename(tmp.c_str(), port_file) != 0) {
            std::fprintf(stderr, "%s: cannot write the port file %s: ", program, port_file);
            std::perror(nullptr);
            std::exit(1);
        }
    }
    std::printf("%s on 127.0.0.1:%s\n", banner, ports.c_str());
    std::fflush(stdout);
    return fds;
}

// A socket listening on 127.0.0.1:port (0: a free one), its port written to port_file when given and
// printed as "<banner> on 127.0.0.1:PORT"; exits with status 1 when it cannot listen.
inline int listen_on(int port, const char* port_file, const char* program, const char* banner) {
    return listen_on_many(1, port, port_file, program, banner)[0];
}

}  // namespace dx1
