#!/usr/bin/env python3
"""An HTTP/2 client (prior knowledge, over TCP) for spindle-wasm's tests,
on the `h2` library: it holds uploads back and opens many streams on one
connection, which the command-line clients do not do on demand.

Prints one line of `key=value` results and exits 0 when it could run at
all; the Rust test judges the results.

    h2client.py MODE PORT

Modes:
  duplex   a POST whose first piece is sent and whose rest is held back
           until the first piece has come back (up to 10 s), then sent
           with the stream's end
  streams  40 POSTs at once on one connection, each body in two DATA
           frames, every answer compared with its upload
  hello    two GETs, one after the other, on one connection
"""

import socket
import sys
import time

import h2.config
import h2.connection
import h2.events


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.settimeout(0.1)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()
        self.status, self.headers, self.body, self.ended = {}, {}, {}, set()

    def flush(self):
        self.sock.sendall(self.conn.data_to_send())

    def request(self, method, stream, end=True):
        self.conn.send_headers(stream, [(":method", method), (":path", "/"),
                                        (":scheme", "http"), (":authority", "a")],
                               end_stream=end)
        self.body[stream] = b""

    def pump(self, until, secs=10):
        """Reads frames until `until()` holds or `secs` pass."""
        deadline = time.time() + secs
        while not until() and time.time() < deadline:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                break
            for e in self.conn.receive_data(data):
                if isinstance(e, h2.events.ResponseReceived):
                    h = dict(e.headers)
                    self.status[e.stream_id] = h.get(":status")
                    self.headers[e.stream_id] = h
                elif isinstance(e, h2.events.DataReceived):
                    self.body[e.stream_id] += e.data
                    self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                elif isinstance(e, h2.events.StreamEnded):
                    self.ended.add(e.stream_id)
                elif isinstance(e, h2.events.StreamReset):
                    self.ended.add(e.stream_id)
            self.flush()


def duplex(port):
    c = Client(port)
    c.request("POST", 1, end=False)
    c.conn.send_data(1, b"first piece\n")
    c.flush()
    c.pump(lambda: c.body[1])
    early = c.body[1]
    c.conn.send_data(1, b"second piece\n", end_stream=True)
    c.flush()
    c.pump(lambda: 1 in c.ended)
    print(f"status={c.status.get(1)} early={early!r} body={c.body[1]!r} ended={int(1 in c.ended)}")


def streams(port):
    c = Client(port)
    ids = [1 + 2 * i for i in range(40)]
    sent = {}
    for n, s in enumerate(ids):
        c.request("POST", s, end=False)
        first, rest = (b"stream %d " % n) * (1 + n % 7), b"end %d" % n
        c.conn.send_data(s, first)
        c.conn.send_data(s, rest, end_stream=True)
        sent[s] = first + rest
    c.flush()
    c.pump(lambda: len(c.ended) == len(ids), secs=20)
    good = sum(1 for s in ids if s in c.ended and c.status.get(s) == "200" and c.body[s] == sent[s])
    bad = [(s, c.status.get(s), c.body[s][:30]) for s in ids if c.body[s] != sent[s]][:3]
    print(f"good={good} of={len(ids)} bad={bad!r}")


def hello(port):
    c = Client(port)
    out = []
    for s in (1, 3):
        c.request("GET", s)
        c.flush()
        c.pump(lambda: s in c.ended)
        out.append(f"status{s}={c.status.get(s)} length{s}={c.headers.get(s, {}).get('content-length')} "
                   f"body{s}={c.body[s]!r}")
    print(" ".join(out))


if __name__ == "__main__":
    {"duplex": duplex, "streams": streams, "hello": hello}[sys.argv[1]](int(sys.argv[2]))
