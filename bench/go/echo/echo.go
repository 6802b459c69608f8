// Echo server for bench/net.py: one goroutine per connection, a 4 KiB
// buffer each. Run with GOMAXPROCS=1. Prints "LISTENING <addr>".
package main

import (
	"fmt"
	"net"
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
	for {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		go func(c net.Conn) {
			defer c.Close()
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				if err != nil || n == 0 {
					return
				}
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}(c)
	}
}
