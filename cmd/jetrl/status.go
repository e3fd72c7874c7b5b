package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/nats-io/nats.go"
)

type statusCmd struct {
	NATS  string        `name:"nats" required:"" env:"JETRL_NATS_URL" help:"NATS server URL of a running mesh."`
	Wait  time.Duration `name:"wait" default:"500ms" help:"How long to gather answers."`
	JSON  bool          `name:"json" help:"Print one JSON object per service replica (with --watch, one per sample)."`
	Watch time.Duration `name:"watch" help:"Instead of every counter once, a line per replica (env hosts too) every this long, with rates since the previous sample and each stage's stream backlog, until interrupted (e.g. 2s)."`
	Count int           `name:"count" default:"0" help:"With --watch, stop after this many samples (0: until interrupted)."`
}

// Validate checks the flags.
func (c *statusCmd) Validate() error {
	switch {
	case c.Wait <= 0:
		return fmt.Errorf("--wait %v must be positive", c.Wait)
	case c.Watch < 0:
		return fmt.Errorf("--watch %v must not be negative", c.Watch)
	case c.Watch > 0 && c.Watch <= c.Wait:
		return fmt.Errorf("--watch %v must be longer than --wait %v (each sample waits that long for answers)", c.Watch, c.Wait)
	case c.Count < 0:
		return fmt.Errorf("--count %d must not be negative", c.Count)
	case c.Count > 0 && c.Watch == 0:
		return errors.New("--count needs --watch")
	}
	return nil
}

// statusServices are the services that answer on proto.SubjectStatus.
var statusServices = []string{"rollout", "replay-buffer", "advantage-normalizer", "trainer"}

// Run asks every replica of every service for its counters (each replica answers the same request) and
// prints what arrives within --wait.
func (c *statusCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	log, _ := logging.New("jetrl-status", "error", false, os.Stderr)
	nc, err := bus.Connect(ctx, c.NATS, "jetrl-status", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	if c.Watch > 0 {
		js, err := bus.JetStream(nc)
		if err != nil {
			return err
		}
		return c.watch(ctx, nc, js, os.Stdout)
	}
	return c.once(ctx, nc, os.Stdout)
}

// once prints the run's settings and every replica's counters, asked once.
func (c *statusCmd) once(ctx context.Context, nc *nats.Conn, out io.Writer) error {
	if settings, err := runSettings(ctx, nc); err == nil {
		if c.JSON {
			fmt.Fprintf(out, "{\"run\": %s}\n", bytes.TrimSpace(settings))
		} else {
			fmt.Fprintf(out, "run settings (KV %s/%s):\n%s\n", proto.BucketRun, proto.KeyRunConfig, settings)
		}
	}
	subjects := make([]string, len(statusServices))
	for i, svc := range statusServices {
		subjects[i] = proto.SubjectStatus(svc)
	}
	all, err := gather(nc, c.Wait, subjects...) // asked at once: the services' counters are of one moment
	if err != nil {
		return err
	}
	var replies []map[string]any
	for _, svc := range statusServices {
		got := slices.DeleteFunc(slices.Clone(all), func(r map[string]any) bool { return r["service"] != svc })
		if len(got) == 0 {
			replies = append(replies, map[string]any{"service": svc, "status": "no replica answered"})
		}
		replies = append(replies, got...)
	}
	for _, r := range replies {
		if c.JSON {
			b, _ := json.Marshal(r)
			fmt.Fprintln(out, string(b))
			continue
		}
		fmt.Fprintf(out, "%s %v\n", r["service"], r["id"])
		st, ok := r["status"].(map[string]any)
		if !ok {
			fmt.Fprintf(out, "  %v\n", r["status"])
			continue
		}
		keys := make([]string, 0, len(st))
		for k := range st {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(out, "  %-28s %v\n", k, st[k])
		}
	}
	return nil
}

// gather sends one request to each subject and collects every JSON reply that arrives within wait.
func gather(nc *nats.Conn, wait time.Duration, subjects ...string) ([]map[string]any, error) {
	raw, err := gatherRaw(nc, wait, subjects...)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, b := range raw {
		var r map[string]any
		if json.Unmarshal(b, &r) == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// runSettings reads the settings of the run in force from KV.
func runSettings(ctx context.Context, nc *nats.Conn) ([]byte, error) {
	js, err := bus.JetStream(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, proto.KeyRunConfig)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}
