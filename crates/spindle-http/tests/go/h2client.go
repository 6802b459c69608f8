// A Go net/http client over TLS for spindle-http's tests: GETs URL N times
// concurrently, trusting the CA in CA_FILE, and prints one line:
// "proto=HTTP/2.0 ok=N conns=K" (K: connections Go dialed).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

func main() {
	url, caFile := os.Args[1], os.Args[2]
	n, _ := strconv.Atoi(os.Args[3])
	pem, err := os.ReadFile(caFile)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	var conns int64
	dialer := &net.Dialer{}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			atomic.AddInt64(&conns, 1)
			return dialer.DialContext(ctx, network, addr)
		},
	}
	client := &http.Client{Transport: tr}
	// One request first, so the rest find the connection.
	resp, err := client.Get(url)
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	proto := resp.Proto
	var ok int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := client.Get(url)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode == 200 && r.Proto == "HTTP/2.0" {
				atomic.AddInt64(&ok, 1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("proto=%s ok=%d conns=%d\n", proto, ok, conns)
}
