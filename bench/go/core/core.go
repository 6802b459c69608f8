// Fiber-core benchmarks for Go: core <yield|yield2|yield-lone|spawn|spawn-value|spawn-batch|rss> N (run with GOMAXPROCS=1).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

func rssKiB() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

// gosched runs k goroutines that each call runtime.Gosched per times, and
// returns how long until all are done.
func gosched(k, per int) time.Duration {
	var wg sync.WaitGroup
	wg.Add(k)
	start := time.Now()
	for g := 0; g < k; g++ {
		go func() {
			for i := 0; i < per; i++ {
				runtime.Gosched()
			}
			wg.Done()
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func main() {
	bench := os.Args[1]
	n, _ := strconv.Atoi(os.Args[2])
	switch bench {
	case "yield":
		// Two goroutines yielding on one P: ns per yield.
		per := n / 2
		fmt.Printf("RESULT %.3f ns\n", float64(gosched(2, per).Nanoseconds())/float64(2*per))
	case "yield2":
		// Four goroutines yielding on GOMAXPROCS=2 (Spindle's row pins two
		// to each of its two workers): ns per yield of one P.
		per := n / 2
		fmt.Printf("RESULT %.3f ns\n", float64(gosched(4, per).Nanoseconds())/float64(2*per))
	case "spawn":
		done := make(chan struct{})
		for i := 0; i < 1000; i++ {
			go func() { done <- struct{}{} }()
			<-done
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			go func() { done <- struct{}{} }()
			<-done
		}
		fmt.Printf("RESULT %.3f ns\n", float64(time.Since(start).Nanoseconds())/float64(n))
	case "spawn-value":
		res := make(chan int)
		sum := 0
		for i := 0; i < 1000; i++ {
			go func(i int) { res <- i }(i)
			sum += <-res
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			go func(i int) { res <- i }(i)
			sum += <-res
		}
		ns := float64(time.Since(start).Nanoseconds()) / float64(n)
		if sum != 999*1000/2+n*(n-1)/2 {
			panic("bad sum")
		}
		fmt.Printf("RESULT %.3f ns\n", ns)
	case "spawn-batch":
		// Spawn 1 000 goroutines, each with its own result channel (a
		// join handle), then receive them in order.
		batch := func(base int) int {
			hs := make([]chan int, 1000)
			for k := range hs {
				hs[k] = make(chan int, 1)
				go func(c chan int, i int) { c <- i }(hs[k], base+k)
			}
			sum := 0
			for _, c := range hs {
				sum += <-c
			}
			return sum
		}
		batch(0)
		start := time.Now()
		sum := 0
		for b := 0; b < n/1000; b++ {
			sum += batch(b * 1000)
		}
		m := n / 1000 * 1000
		if sum != m*(m-1)/2 {
			panic("bad sum")
		}
		fmt.Printf("RESULT %.3f ns\n", float64(time.Since(start).Nanoseconds())/float64(m))
	case "yield-lone":
		for i := 0; i < 1000; i++ {
			runtime.Gosched()
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			runtime.Gosched()
		}
		fmt.Printf("RESULT %.3f ns\n", float64(time.Since(start).Nanoseconds())/float64(n))
	case "fibers":
		start := time.Now()
		results := make([]int, n)
		var wg sync.WaitGroup
		wg.Add(n)
		for i := 0; i < n; i++ {
			go func(i int) {
				runtime.Gosched()
				results[i] = i
				wg.Done()
			}(i)
		}
		wg.Wait()
		sum := 0
		for _, v := range results {
			sum += v
		}
		if sum != n*(n-1)/2 {
			panic("bad sum")
		}
		fmt.Printf("RESULT %.3f ms\n", float64(time.Since(start).Nanoseconds())/1e6)
	case "spawn-park":
		start := time.Now()
		block := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(n)
		for i := 0; i < n; i++ {
			go func() { wg.Done(); <-block }()
		}
		wg.Wait()
		fmt.Printf("RESULT %.3f ms\n", float64(time.Since(start).Nanoseconds())/1e6)
		os.Exit(0)
	case "rss":
		before := rssKiB()
		block := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(n)
		for i := 0; i < n; i++ {
			go func() { wg.Done(); <-block }()
		}
		wg.Wait()
		fmt.Printf("RESULT %.3f KiB\n", (rssKiB()-before)/float64(n))
		os.Exit(0)
	}
}
