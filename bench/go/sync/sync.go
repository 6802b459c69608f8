// Channel and mutex benchmarks for Go: sync <pingpong|pingpong-locked|crossings|mutex|contended> N.
// Run with GOMAXPROCS=1 or 2.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	bench := os.Args[1]
	n, _ := strconv.Atoi(os.Args[2])
	var ns float64
	switch bench {
	case "pingpong":
		ns = pingpong(n, false)
	case "pingpong-locked":
		// Each goroutine locked to its own thread: a wake cannot run the
		// woken goroutine on the waker's thread, so every hop crosses
		// threads (in "pingpong" the woken goroutine runs next on the
		// waker's P).
		ns = pingpong(n, true)
	case "crossings":
		// "pingpong", counting the round trips whose two ends ran on
		// different threads (no time: the bookkeeping costs).
		var lastPong int64
		c1 := make(chan int, 1)
		c2 := make(chan int, 1)
		go func() {
			for v := range c1 {
				atomic.StoreInt64(&lastPong, int64(syscall.Gettid()))
				c2 <- v
			}
		}()
		crossed := 0
		for i := 0; i < n; i++ {
			c1 <- i
			<-c2
			if atomic.LoadInt64(&lastPong) != int64(syscall.Gettid()) {
				crossed++
			}
		}
		close(c1)
		fmt.Printf("CROSSED %d of %d\n", crossed, n)
		return
	case "mutex":
		var m sync.Mutex
		x := 0
		start := time.Now()
		for i := 0; i < n; i++ {
			m.Lock()
			x++
			m.Unlock()
		}
		ns = float64(time.Since(start).Nanoseconds()) / float64(n)
	case "contended":
		var m sync.Mutex
		x := 0
		var wg sync.WaitGroup
		start := time.Now()
		for k := 0; k < 4; k++ {
			wg.Add(1)
			go func() {
				for i := 0; i < n/4; i++ {
					m.Lock()
					x++
					m.Unlock()
				}
				wg.Done()
			}()
		}
		wg.Wait()
		ns = float64(time.Since(start).Nanoseconds()) / float64(n/4*4)
	}
	fmt.Printf("RESULT %.3f ns\n", ns)
}

// pingpong times n round trips over two capacity-1 channels, with each
// goroutine locked to its own thread if lock is set.
func pingpong(n int, lock bool) float64 {
	if lock {
		runtime.LockOSThread()
	}
	c1 := make(chan int, 1)
	c2 := make(chan int, 1)
	go func() {
		if lock {
			runtime.LockOSThread()
		}
		for v := range c1 {
			c2 <- v
		}
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		c1 <- i
		<-c2
	}
	ns := float64(time.Since(start).Nanoseconds()) / float64(n)
	close(c1)
	return ns
}
