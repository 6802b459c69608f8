#!/usr/bin/env python3
"""An HTTP/2 (h2c) upstream that misbehaves on purpose, for the client's
retry rules. Prints "port=N" once listening, then one line per event:
"conn" for each connection accepted, "req METHOD PATH" for each request
it answers.

    h2upstream.py MODE

Modes:
  goaway-after-first  answers a connection's first request, then sends
                      GOAWAY (last stream 1) and closes: a second request
                      on that connection was not processed.
  refuse-first        resets the first stream of the first connection with
                      REFUSED_STREAM, answers everything else.
  die-mid-request     the first connection reads a request and closes
                      without answering; later ones answer.
  trailers            answers with a body and trailers `grpc-status: 0`,
                      `grpc-message: fine`, and the request's own trailer
                      `x-sum` echoed as `x-sum-seen`.
"""

import socket
import sys
import threading

import h2.config
import h2.connection
import h2.errors
import h2.events

MODE = sys.argv[1]
lock = threading.Lock()
first_conn = [True]


def say(line):
    with lock:
        print(line, flush=True)


def serve(sock, is_first):
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    answered = 0
    heads = {}
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                heads[ev.stream_id] = dict(ev.headers)
                if ev.stream_ended:
                    answered = respond(sock, conn, ev.stream_id, heads, is_first, answered)
                    if answered < 0:
                        return
            elif isinstance(ev, h2.events.TrailersReceived):
                heads.setdefault(ev.stream_id, {})[b"trailers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                answered = respond(sock, conn, ev.stream_id, heads, is_first, answered)
                if answered < 0:
                    return
        sock.sendall(conn.data_to_send())


def respond(sock, conn, sid, heads, is_first, answered):
    h = heads.get(sid, {})
    method, path = h.get(b":method", b"?").decode(), h.get(b":path", b"?").decode()
    if MODE == "refuse-first" and is_first and answered == 0:
        conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
        sock.sendall(conn.data_to_send())
        return 1
    if MODE == "die-mid-request" and is_first:
        sock.close()
        return -1
    if MODE == "goaway-after-first" and answered >= 1:
        return answered  # never answered: the GOAWAY below says so
    say(f"req {method} {path}")
    body = f"{method} {path}".encode()
    conn.send_headers(sid, [(":status", "200"), ("content-length", str(len(body)))]
                      if MODE != "trailers" else [(":status", "200")])
    conn.send_data(sid, body, end_stream=MODE != "trailers")
    if MODE == "trailers":
        fields = [("grpc-status", "0"), ("grpc-message", "fine")]
        seen = h.get(b"trailers", {}).get(b"x-sum")
        if seen is not None:
            fields.append(("x-sum-seen", seen.decode()))
        conn.send_headers(sid, fields, end_stream=True)
    if MODE == "goaway-after-first":
        conn.close_connection(last_stream_id=sid)
        sock.sendall(conn.data_to_send())
        sock.close()
        return -1
    sock.sendall(conn.data_to_send())
    return answered + 1


def main():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    say(f"port={listener.getsockname()[1]}")
    while True:
        sock, _ = listener.accept()
        say("conn")
        with lock:
            is_first, first_conn[0] = first_conn[0], False
        threading.Thread(target=serve, args=(sock, is_first), daemon=True).start()


if __name__ == "__main__":
    main()
