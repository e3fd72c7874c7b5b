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

// jetrl replay --data prints the stored messages of an embedded run's folder and leaves the folder as it
// was: no file or directory is created, removed or written.
func TestReplayDataLeavesTheFolderUnmodified(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats")
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := bus.Connect(ctx, srv.URL(), "jetrl-replay-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		b, err := msgpack.Marshal(map[string]any{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, proto.SubjectEpisodes("alfworld"), b); err != nil {
			t.Fatal(err)
		}
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
