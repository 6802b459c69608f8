// Hello, World! over TLS with net/http for bench/h2.py: HTTP/2 by ALPN, as
// Go's server does by default (GOMAXPROCS=1). The certificate and key are
// in $BENCH_TLS_CERT and $BENCH_TLS_KEY.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
)

func main() {
	addr := "127.0.0.1:0"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	fmt.Printf("LISTENING %s\n", l.Addr())
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("Hello, World!"))
	})
	panic(http.ServeTLS(l, handler, os.Getenv("BENCH_TLS_CERT"), os.Getenv("BENCH_TLS_KEY")))
}
