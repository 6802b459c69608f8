#define _GNU_SOURCE
/* The floor for bench/http.py: a minimal single-threaded HTTP/1.1
 * server on raw epoll (edge-triggered). It answers every request head
 * ("\r\n\r\n") it sees with a fixed `Hello, World!` response, pipelined
 * heads in one write; no parsing beyond that, no Date header.
 *
 *     epoll_http 127.0.0.1:0      prints "LISTENING <addr>"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static const char RESP[] =
    "HTTP/1.1 200 OK\r\ncontent-length: 13\r\ncontent-type: text/plain\r\n\r\nHello, World!";

struct conn {
    int fd;
    int matched; /* how much of "\r\n\r\n" the previous read ended in */
};

int main(int argc, char **argv) {
    const char *arg = argc > 1 ? argv[1] : "127.0.0.1:0";
    char host[64];
    snprintf(host, sizeof host, "%s", arg);
    char *colon = strrchr(host, ':');
    int port = colon ? atoi(colon + 1) : 0;
    if (colon) *colon = 0;

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 4096)) {
        perror("bind/listen");
        return 1;
    }
    socklen_t len = sizeof sa;
    getsockname(lfd, (struct sockaddr *)&sa, &len);
    printf("LISTENING %s:%d\n", host, ntohs(sa.sin_port));
    fflush(stdout);

    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    struct epoll_event events[256];
    static char in[65536];
    static char out[65536 * 2];
    const size_t rlen = sizeof RESP - 1;
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                for (;;) {
                    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
                    if (fd < 0) break;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct conn *nc = calloc(1, sizeof *nc);
                    nc->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN | EPOLLET | EPOLLRDHUP, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            int closed = 0;
            for (;;) {
                ssize_t r = read(c->fd, in, sizeof in);
                if (r == 0) { closed = 1; break; }
                if (r < 0) { if (errno != EAGAIN) closed = 1; break; }
                size_t heads = 0;
                static const char END[] = "\r\n\r\n";
                for (ssize_t k = 0; k < r; k++) {
                    if (in[k] == END[c->matched]) {
                        if (++c->matched == 4) { heads++; c->matched = 0; }
                    } else {
                        c->matched = in[k] == '\r' ? 1 : 0;
                    }
                }
                size_t o = 0;
                while (heads--) {
                    if (o + rlen > sizeof out) {
                        if (write(c->fd, out, o) < 0) { closed = 1; break; }
                        o = 0;
                    }
                    memcpy(out + o, RESP, rlen);
                    o += rlen;
                }
                if (o && write(c->fd, out, o) < 0) closed = 1;
                if (closed) break;
            }
            if (closed) {
                close(c->fd);
                free(c);
            }
        }
    }
}
