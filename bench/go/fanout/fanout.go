// Fan-out peer for bench/hook.py.
//
//	fanout server ADDR DELAY_MS   an HTTP server answering every request after DELAY_MS
//	fanout client URL N           N goroutines, one GET each; prints "WALL <seconds>"
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

func main() {
	switch os.Args[1] {
	case "server":
		delay, _ := strconv.Atoi(os.Args[3])
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Duration(delay) * time.Millisecond)
			io.WriteString(w, "done\n")
		})
		fmt.Println("LISTENING", os.Args[2])
		if err := http.ListenAndServe(os.Args[2], nil); err != nil {
			panic(err)
		}
	case "client":
		n, _ := strconv.Atoi(os.Args[3])
		// One connection per request, as the Rust clients make.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0}}
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		failed := 0
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(os.Args[2])
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		fmt.Printf("WALL %f FAILED %d\n", time.Since(start).Seconds(), failed)
	}
}
