#!/usr/bin/env python3
"""A hostile (or merely demanding) HTTP/2 peer, for spindle-http's tests.

Writes raw frames, so it can say what a well-behaved client library never
would. Each mode prints one line of `key=value` results and exits 0 when
it could run its attack at all; the Rust test judges the results.

    h2peer.py MODE HOST PORT

Modes:
  rapid-reset   10 000 HEADERS each followed at once by RST_STREAM
  continuation  one HEADERS without END_HEADERS, then CONTINUATION frames
                forever (up to 64 MiB)
  settings      100 000 SETTINGS frames, never reading the ACKs
  zero-window   SETTINGS_INITIAL_WINDOW_SIZE 0, asks for a large response,
                never opens the window
  no-body       a POST whose body never comes
  streams       1 000 concurrent GETs against a server allowing 100
  empty-data    a POST to a handler that does not read, then 100 000 empty
                DATA frames
  tiny-data     the same with 1-byte DATA frames
  ping          100 000 PINGs, never reading the ACKs
  reset         GET /watch, RST_STREAM(CANCEL) 300 ms later, then GET
                /version on the same connection
  idle          a well-behaved idle client (it answers PING and SETTINGS)
                that waits for the server to close, up to 20 s
"""

import socket
import struct
import sys
import time

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def settings(pairs=()):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


class Peer:
    def __init__(self, host, port, pairs=()):
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.enc = hpack.Encoder()
        self.buf = b""
        self.sock.sendall(PREFACE + settings(pairs))

    def headers(self, path, method="GET", end_stream=True):
        return self.enc.encode([(":method", method), (":scheme", "http"),
                                (":path", path), (":authority", "test")])

    def send(self, data):
        self.sock.sendall(data)

    def frames(self, deadline):
        """Yields (kind, flags, stream, payload) until the peer closes or
        the deadline passes."""
        while time.time() < deadline:
            while len(self.buf) >= 9:
                n = struct.unpack(">I", b"\0" + self.buf[:3])[0]
                if len(self.buf) < 9 + n:
                    break
                kind, flags = self.buf[3], self.buf[4]
                stream = struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
                payload = self.buf[9:9 + n]
                self.buf = self.buf[9 + n:]
                yield kind, flags, stream, payload
            try:
                self.sock.settimeout(max(0.01, deadline - time.time()))
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return
            except OSError:
                return
            if not chunk:
                return
            self.buf += chunk


def goaway_code(payload):
    return struct.unpack(">I", payload[4:8])[0] if len(payload) >= 8 else None


def rapid_reset(p):
    t0 = time.time()
    sent = 0
    batch = []
    try:
        for i in range(10_000):
            sid = 2 * i + 1
            batch.append(frame(HEADERS, END_HEADERS | END_STREAM, sid, p.headers("/")))
            batch.append(frame(RST_STREAM, 0, sid, struct.pack(">I", 8)))  # CANCEL
            if len(batch) >= 200:
                p.send(b"".join(batch))
                sent += len(batch) // 2
                batch = []
        if batch:
            p.send(b"".join(batch))
            sent += len(batch) // 2
    except OSError:
        pass  # the server closed on us: that is an answer
    answered, goaway = 0, None
    for kind, flags, stream, payload in p.frames(time.time() + 10):
        if kind == HEADERS and stream:
            answered += 1
        if kind == GOAWAY:
            goaway = goaway_code(payload)
    print(f"sent={sent} answered={answered} goaway={goaway} secs={time.time() - t0:.2f}")


def continuation(p):
    t0 = time.time()
    block = p.headers("/")
    p.send(frame(HEADERS, 0, 1, block))
    junk = hpack.Encoder().encode([("x-flood", "a" * 1000)]) * 16
    sent = 0
    closed = False
    try:
        while sent < 64 << 20:
            p.send(frame(CONTINUATION, 0, 1, junk))
            sent += len(junk)
    except OSError:
        closed = True
    goaway = None
    for kind, flags, stream, payload in p.frames(time.time() + 5):
        if kind == GOAWAY:
            goaway = goaway_code(payload)
    print(f"sent={sent} closed={int(closed)} goaway={goaway} secs={time.time() - t0:.2f}")


def settings_flood(p):
    t0 = time.time()
    sent = 0
    p.sock.settimeout(10)
    try:
        chunk = settings([(4, 65535)]) * 1000
        for _ in range(100):
            p.send(chunk)
            sent += 1000
    except OSError:
        pass
    goaway, acks = None, 0
    for kind, flags, stream, payload in p.frames(time.time() + 5):
        if kind == SETTINGS and flags & 1:
            acks += 1
        if kind == GOAWAY:
            goaway = goaway_code(payload)
    print(f"sent={sent} acks={acks} goaway={goaway} secs={time.time() - t0:.2f}")


def zero_window(p, path):
    t0 = time.time()
    # SETTINGS_INITIAL_WINDOW_SIZE = 0 (set in the constructor's SETTINGS).
    p.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, p.headers(path)))
    got, reset, status = 0, None, None
    dec = hpack.Decoder()
    for kind, flags, stream, payload in p.frames(time.time() + 15):
        if kind == HEADERS and stream == 1:
            status = dict(dec.decode(payload)).get(":status")
        if kind == DATA:
            got += len(payload)
        if kind == RST_STREAM and stream == 1:
            reset = struct.unpack(">I", payload)[0]
            break
    print(f"status={status} data={got} reset={reset} secs={time.time() - t0:.2f}")


def no_body(p):
    t0 = time.time()
    p.send(frame(HEADERS, END_HEADERS, 1, p.headers("/echo", method="POST")))
    status, reset = None, None
    dec = hpack.Decoder()
    for kind, flags, stream, payload in p.frames(time.time() + 15):
        if kind == HEADERS and stream == 1:
            status = dict(dec.decode(payload)).get(":status")
            break
        if kind == RST_STREAM and stream == 1:
            reset = struct.unpack(">I", payload)[0]
            break
    print(f"status={status} reset={reset} secs={time.time() - t0:.2f}")


def streams(p):
    t0 = time.time()
    batch = [frame(HEADERS, END_HEADERS | END_STREAM, 2 * i + 1, p.headers("/slow"))
             for i in range(1000)]
    p.send(b"".join(batch))
    ok, refused, other = 0, 0, 0
    done = set()
    dec = hpack.Decoder()
    for kind, flags, stream, payload in p.frames(time.time() + 20):
        if kind == HEADERS and stream:
            if dict(dec.decode(payload)).get(":status") == "200":
                ok += 1
            else:
                other += 1
            done.add(stream)
        elif kind == RST_STREAM:
            if struct.unpack(">I", payload)[0] == 7:  # REFUSED_STREAM
                refused += 1
            else:
                other += 1
            done.add(stream)
        elif kind == GOAWAY:
            break
        if len(done) == 1000:
            break
    print(f"ok={ok} refused={refused} other={other} secs={time.time() - t0:.2f}")


def idle(p):
    t0 = time.time()
    goaway, closed = None, 0
    for kind, flags, stream, payload in p.frames(time.time() + 20):
        if kind == PING and not flags & 1:
            p.send(frame(PING, 1, 0, payload))
        elif kind == SETTINGS and not flags & 1:
            p.send(frame(SETTINGS, 1, 0))
        elif kind == GOAWAY:
            goaway = goaway_code(payload)
    else:
        closed = 1 if time.time() < t0 + 20 else 0
    print(f"goaway={goaway} closed={closed} secs={time.time() - t0:.2f}")


def data_flood(p, size):
    t0 = time.time()
    p.send(frame(HEADERS, END_HEADERS, 1, p.headers("/slow", method="POST")))
    sent = 0
    try:
        chunk = frame(DATA, 0, 1, b"x" * size) * 1000
        for _ in range(100):
            p.send(chunk)
            sent += 1000
    except OSError:
        pass
    goaway = None
    for kind, flags, stream, payload in p.frames(time.time() + 5):
        if kind == GOAWAY:
            goaway = goaway_code(payload)
    print(f"sent={sent} goaway={goaway} secs={time.time() - t0:.2f}")


def ping_flood(p):
    t0 = time.time()
    sent = 0
    try:
        chunk = frame(PING, 0, 0, b"12345678") * 1000
        for _ in range(100):
            p.send(chunk)
            sent += 1000
    except OSError:
        pass
    goaway, acks = None, 0
    for kind, flags, stream, payload in p.frames(time.time() + 5):
        if kind == PING and flags & 1:
            acks += 1
        if kind == GOAWAY:
            goaway = goaway_code(payload)
    print(f"sent={sent} acks={acks} goaway={goaway} secs={time.time() - t0:.2f}")


def reset(p):
    t0 = time.time()
    p.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, p.headers("/watch")))
    time.sleep(0.3)
    p.send(frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))
    time.sleep(0.2)
    p.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, p.headers("/version")))
    status = None
    dec = hpack.Decoder()
    for kind, flags, stream, payload in p.frames(time.time() + 10):
        if kind == HEADERS and stream == 3:
            status = dict(dec.decode(payload)).get(":status")
            break
        if kind == HEADERS:
            dec.decode(payload)
    print(f"second={status} secs={time.time() - t0:.2f}")


def main():
    mode, host, port = sys.argv[1:4]
    if mode == "rapid-reset":
        rapid_reset(Peer(host, port))
    elif mode == "continuation":
        continuation(Peer(host, port))
    elif mode == "settings":
        settings_flood(Peer(host, port))
    elif mode == "zero-window":
        zero_window(Peer(host, port, [(4, 0)]), "/big")
    elif mode == "no-body":
        no_body(Peer(host, port))
    elif mode == "streams":
        streams(Peer(host, port))
    elif mode == "empty-data":
        data_flood(Peer(host, port), 0)
    elif mode == "tiny-data":
        data_flood(Peer(host, port), 1)
    elif mode == "ping":
        ping_flood(Peer(host, port))
    elif mode == "reset":
        reset(Peer(host, port))
    elif mode == "idle":
        idle(Peer(host, port))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
