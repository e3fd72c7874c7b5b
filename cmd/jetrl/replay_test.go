package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"
)

// storeListing describes every entry under dir: its mode, size, modification time and content hash.
func storeListing(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		line := fmt.Sprintf("%v %d %s", info.Mode(), info.Size(), info.ModTime().Format(time.RFC3339Nano))
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		}
		out[rel] = line
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// replayServer starts an embedded server storing under dir, with the mesh's streams, and connects to it;
// both are closed when the test ends (a test may shut the server down before).
func replayServer(t *testing.T, dir string) (*bus.Embedded, *nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	nc, err := bus.Connect(ctx, srv.URL(), "jetrl-replay-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js, ctx
}

// publishEpisode stores {"i": i} on task's episodes subject.
func publishEpisode(t *testing.T, ctx context.Context, js jetstream.JetStream, task string, i int) {
	t.Helper()
	b, err := msgpack.Marshal(map[string]any{"i": i})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, proto.SubjectEpisodes(task), b); err != nil {
		t.Fatal(err)
	}
}

// jetrl replay --data prints the stored messages of an embedded run's folder and leaves the folder as it
// was: no file or directory is created, removed or written.
func TestReplayDataLeavesTheFolderUnmodified(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats")
	srv, nc, js, ctx := replayServer(t, dir)
	const n = 5
	for i := range n {
		publishEpisode(t, ctx, js, "alfworld", i)
	}
	nc.Close()
	srv.Shutdown()

	before := storeListing(t, dir)
	// Files written in the same clock tick as the listing would keep their time if rewritten.
	time.Sleep(50 * time.Millisecond)
	var out bytes.Buffer
	c := &replayCmd{Stream: "episodes", Data: dir, out: &out}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(&globals{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), n, out.String())
	}
	var last struct {
		Seq  uint64         `json:"seq"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(lines[n-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Seq != n || last.Data["i"] != float64(n-1) {
		t.Errorf("last line %s, want sequence %d with i %d", lines[n-1], n, n-1)
	}

	after := storeListing(t, dir)
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: removed by the replay", p)
		} else if a != b {
			t.Errorf("%s: %s before the replay, %s after", p, b, a)
		}
	}
	for p, a := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s (%s): created by the replay", p, a)
		}
	}
}

// jetrl replay --data prints messages past their stream's age limit too: the server that loads the copy
// would otherwise expire them before anything reads them.
func TestReplayDataKeepsMessagesPastTheAgeLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats")
	srv, nc, js, ctx := replayServer(t, dir)
	stream, err := js.Stream(ctx, proto.StreamEpisodes)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const age = 3 * time.Second
	cfg := info.Config
	cfg.MaxAge, cfg.Duplicates = age, age
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	const n = 4
	for i := range n {
		publishEpisode(t, ctx, js, "alfworld", i)
	}
	nc.Close()
	srv.Shutdown()
	time.Sleep(age + 200*time.Millisecond)

	var out bytes.Buffer
	c := &replayCmd{Stream: "episodes", Data: dir, out: &out}
	if err := c.Run(&globals{}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); out.Len() == 0 || len(lines) != n {
		t.Fatalf("%d bytes printed, want %d lines of messages past the stream's age limit:\n%s", out.Len(), n, out.String())
	}

	// The lifted limit is only the copy's: the folder itself still holds the stream's own configuration.
	copied := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(copied, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	lifted, err := keepAgedMessages(copied)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range lifted {
		found = found || s == proto.StreamEpisodes
	}
	if !found {
		t.Errorf("lifted the age limit of %v, want %s among them", lifted, proto.StreamEpisodes)
	}
}

// jetrl replay of a stream that holds nothing, or nothing of the task asked for, prints nothing, and is no
// error.
func TestReplayOfAnEmptyStreamPrintsNothing(t *testing.T) {
	srv, _, js, ctx := replayServer(t, t.TempDir())
	// The episodes stream holds one of another task: none of the task asked for.
	publishEpisode(t, ctx, js, "webshop", 0)
	for _, stream := range []string{"deadletter", "episodes"} {
		var out bytes.Buffer
		c := &replayCmd{Stream: stream, NATS: srv.URL(), Task: map[bool]string{true: "alfworld"}[stream == "episodes"], out: &out}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		if err := c.Run(&globals{}); err != nil || out.Len() != 0 {
			t.Fatalf("replay of the empty %s stream: %v, %q; want nothing printed, no error", stream, err, out.String())
		}
	}
}
