package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

type replayCmd struct {
	Stream  string        `arg:"" enum:"episodes,batches,train,deadletter" help:"Stream to read: episodes, batches, train or deadletter."`
	NATS    string        `name:"nats" help:"NATS server URL of a running mesh."`
	Data    string        `name:"data" help:"JetStream folder of an embedded run (e.g. out/run/nats), opened read-only: a private server serves a temporary copy of it (under TMPDIR), every stored message included, even those past their stream's age limit (24 h; dead letters 7 days)."`
	FromSeq uint64        `name:"from-seq" help:"Start at this stream sequence."`
	Since   time.Duration `name:"since" help:"Start this long ago (e.g. 10m)."`
	Task    string        `name:"task" help:"Only episodes of this task (episodes stream: filters by subject)."`
	Limit   int           `name:"limit" default:"0" help:"Stop after this many messages (0: all stored now)."`

	out io.Writer // the JSON lines; nil: standard output
}

var replayStreams = map[string]string{
	"episodes": proto.StreamEpisodes, "batches": proto.StreamBatches, "train": proto.StreamTrain, "deadletter": proto.StreamDeadLetter,
}

func (c *replayCmd) Validate() error {
	if (c.NATS == "") == (c.Data == "") {
		return errors.New("give exactly one of --nats or --data")
	}
	if c.FromSeq > 0 && c.Since > 0 {
		return errors.New("give at most one of --from-seq and --since")
	}
	if c.Task != "" && c.Stream != "episodes" {
		return errors.New("--task filters the episodes stream only")
	}
	return nil
}

func (c *replayCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	log, _ := logging.New("jetrl-replay", "error", false, os.Stderr)
	url := c.NATS
	if c.Data != "" {
		if _, err := os.Stat(c.Data); err != nil {
			return fmt.Errorf("--data: %w", err)
		}
		// A JetStream server writes to its store: it deletes messages past their stream's MaxAge as it
		// loads the stream and rewrites stream and consumer state. The private server therefore serves a
		// copy, so that the run's folder is only read and keeps its data, with the streams' age limits
		// lifted, so that it serves every message stored.
		tmp, err := os.MkdirTemp("", "jetrl-replay-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		store := filepath.Join(tmp, "nats")
		if err := os.CopyFS(store, os.DirFS(c.Data)); err != nil {
			return fmt.Errorf("--data: copy: %w", err)
		}
		if _, err := keepAgedMessages(store); err != nil {
			return fmt.Errorf("--data: %w", err)
		}
		srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: store, Name: "jetrl-replay"})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.URL()
	}
	nc, err := bus.Connect(ctx, url, "jetrl-replay", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return err
	}
	stream, err := js.Stream(ctx, replayStreams[c.Stream])
	if err != nil {
		return fmt.Errorf("stream %s: %w", replayStreams[c.Stream], err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case c.FromSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, c.FromSeq
	case c.Since > 0:
		t := time.Now().Add(-c.Since)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	if c.Task != "" {
		cfg.FilterSubjects = []string{proto.SubjectEpisodes(c.Task)}
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	out := c.out
	if out == nil {
		out = os.Stdout
	}
	enc := json.NewEncoder(out)
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil // nothing stored
	}
	for n := 0; c.Limit == 0 || n < c.Limit; n++ {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msg, err := cons.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) || ctx.Err() != nil {
				return nil // nothing more stored
			}
			return err
		}
		md, _ := msg.Metadata()
		var body any
		if err := msgpack.Unmarshal(msg.Data(), &body); err != nil {
			body = map[string]any{"undecodable": err.Error(), "bytes": len(msg.Data())}
		}
		line := map[string]any{"subject": msg.Subject(), "data": body}
		if md != nil {
			line["seq"], line["time"] = md.Sequence.Stream, md.Timestamp.UTC().Format(time.RFC3339Nano)
		}
		if h := msg.Headers(); len(h) > 0 {
			hs := map[string]string{}
			for k, v := range h {
				hs[k] = strings.Join(v, ",")
			}
			line["headers"] = hs
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
		if md != nil && md.Sequence.Stream >= last {
			return nil
		}
	}
	return nil
}
