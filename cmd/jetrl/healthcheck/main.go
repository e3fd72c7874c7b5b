// Command jetrl-healthcheck is the health check of the scratch images in deploy/docker: they have no shell
// and no curl, so docker and docker-compose run this static binary instead. It GETs each URL given and
// exits 0 when every one answers 2xx within the timeout, 1 otherwise (with the reason on stderr).
//
//	jetrl-healthcheck http://127.0.0.1:9090/metrics
//	jetrl-healthcheck -timeout 3s http://127.0.0.1:8222/healthz?js-enabled-only=true
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 3*time.Second, "Give up on a URL after this long.")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: jetrl-healthcheck [-timeout 3s] URL...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	for _, url := range flag.Args() {
		if err := check(url, *timeout); err != nil {
			fmt.Fprintf(os.Stderr, "unhealthy: %v\n", err)
			os.Exit(1)
		}
	}
}

// check GETs url and returns an error unless it answers 2xx within timeout.
func check(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
