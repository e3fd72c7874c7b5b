package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// binaries returns the folder holding nats-server and the five service binaries: $JETRL_BIN (make test
// builds them there), or a fresh build.
func binaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if d := os.Getenv("JETRL_BIN"); d != "" {
			binDir = d
			return
		}
		dir, err := os.MkdirTemp("", "jetrl-bin-*")
		if err != nil {
			binErr = err
			return
		}
		binDir = dir
		pkgs := map[string]string{"nats-server": "github.com/nats-io/nats-server/v2", "jetrl": "github.com/jetrl/jetrl/cmd/jetrl"}
		for _, s := range []string{"env", "rollout", "replay-buffer", "advantage-normalizer", "trainer"} {
			pkgs["jetrl-"+s] = "github.com/jetrl/jetrl/services/" + s + "/cmd/jetrl-" + s
		}
		for name, pkg := range pkgs {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("build %s: %v\n%s", name, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	for _, n := range []string{"nats-server", "jetrl", "jetrl-env", "jetrl-rollout", "jetrl-replay-buffer", "jetrl-advantage-normalizer", "jetrl-trainer"} {
		if _, err := os.Stat(filepath.Join(binDir, n)); err != nil {
			t.Fatalf("missing binary %s in %s (run make build): %v", n, binDir, err)
		}
	}
	return binDir
}

// proc is one OS process of the test, with its output in a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

func start(t *testing.T, dir, name string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	bin := name
	if !strings.HasPrefix(name, "nats-server") {
		bin = "jetrl-" + strings.SplitN(name, "#", 2)[0]
	}
	cmd := exec.Command(filepath.Join(binaries(t), bin), args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- log of %s:\n%s", p.name, tail(p.log))
		}
	})
	return p
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
	p.done <- nil // later calls return at once
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T, within time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- nil
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM; log %s:\n%s", p.name, err, p.log, tail(p.log))
		}
	case <-time.After(within):
		t.Errorf("%s did not stop within %v of SIGTERM; log:\n%s", p.name, within, tail(p.log))
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServicesAsProcesses runs a real nats-server and the five services as separate OS processes, checks
// that episodes reach the trainer and weights reach the rollout, kills the trainer with SIGKILL mid-run and
// restarts it, and then checks by batch and episode ids that nothing was trained twice or lost.
func TestServicesAsProcesses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process signals as on Linux")
	}
	dir := t.TempDir()
	port := freePort(t)
	conf := filepath.Join(dir, "nats.conf")
	err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\nmax_payload: %d\njetstream {\n  store_dir: %q\n}\n", port, proto.ServerMaxPayload, filepath.Join(dir, "js"))), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	natsProc := start(t, dir, "nats-server", "-c", conf)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	common := []string{"--nats", url, "--metrics-addr", "127.0.0.1:0", "--log-level", "info"}
	sizes := []string{"--batch-size", "32"}
	nc := connectWhenUp(t, url)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}

	envP := start(t, dir, "env", common...)
	trainerArgs := append(append([]string{}, common...), "--seed", "3")
	trainerP := start(t, dir, "trainer", trainerArgs...)
	normP := start(t, dir, "advantage-normalizer", common...)
	bufP := start(t, dir, "replay-buffer", append(append([]string{}, common...), sizes...)...)
	rollP := start(t, dir, "rollout", append(append([]string{}, common...), append(sizes, "--concurrency", "32")...)...)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	version := func() int64 {
		kv, err := js.KeyValue(ctx, proto.BucketPolicy)
		if err != nil {
			return -1
		}
		e, err := kv.Get(ctx, proto.KeyPolicyCurrent)
		if err != nil {
			return -1
		}
		var rec proto.PolicyVersion
		if codec.Unmarshal(e.Value(), &rec) != nil {
			return -1
		}
		return rec.Version
	}
	eventually(t, 90*time.Second, "the trainer to publish version 5", func() bool { return version() >= 5 })
	// Weights flow back: the rollout process reports a loaded version past the first.
	eventually(t, 30*time.Second, "the rollout to load a trained version", func() bool {
		st := rolloutStatus(t, nc)
		return st.Version >= 3
	})

	killedAt := version()
	_ = trainerP.cmd.Process.Signal(syscall.SIGKILL)
	<-trainerP.done
	trainerP.done <- nil
	t.Logf("trainer killed with SIGKILL at version %d", killedAt)
	time.Sleep(2 * time.Second) // batches pile up in the train stream meanwhile
	trainerP = start(t, dir, "trainer#2", trainerArgs...)
	eventually(t, 90*time.Second, "training to resume past the kill", func() bool { return version() >= killedAt+5 })

	// Stop producing, then let every released batch reach the trainer.
	rollP.stop(t, 30*time.Second)
	drained := func() bool {
		for _, c := range []struct{ stream, name string }{{proto.StreamBatches, proto.ConsumerNormalizer}, {proto.StreamTrain, proto.ConsumerTrainer}} {
			ci, err := js.Consumer(ctx, c.stream, c.name)
			if err != nil {
				return false
			}
			info, err := ci.Info(ctx)
			if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
				return false
			}
		}
		return true
	}
	eventually(t, 60*time.Second, "the pipeline to drain", drained)
	time.Sleep(time.Second)

	trainIDs, episodesOf := readTrainBatches(t, ctx, js)
	applied := readAppliedBatches(t, ctx, js)
	if len(trainIDs) < 10 {
		t.Fatalf("only %d train batches", len(trainIDs))
	}
	seen := map[string]int{}
	for i, a := range applied {
		if a.Version != int64(i+1) {
			t.Fatalf("step events: position %d has version %d (versions must run 1, 2, 3, ... once each)", i, a.Version)
		}
		seen[a.BatchID]++
		if seen[a.BatchID] > 1 {
			t.Fatalf("batch %s applied twice (versions %v)", a.BatchID, versionsOf(applied, a.BatchID))
		}
	}
	for _, id := range trainIDs {
		if seen[id] != 1 {
			t.Fatalf("train batch %s applied %d times, want exactly once", id, seen[id])
		}
	}
	if len(applied) != len(trainIDs) {
		t.Fatalf("%d batches applied, %d train batches published", len(applied), len(trainIDs))
	}
	inBatch := map[string]string{}
	for _, id := range trainIDs {
		for _, ep := range episodesOf[id] {
			if other, dup := inBatch[ep]; dup {
				t.Fatalf("episode %s is in batches %s and %s", ep, other, id)
			}
			inBatch[ep] = id
		}
	}
	t.Logf("%d batches (%d episodes) each applied exactly once across a trainer SIGKILL at version %d", len(trainIDs), len(inBatch), killedAt)

	for _, p := range []*proc{trainerP, normP, bufP, envP} {
		p.stop(t, 20*time.Second)
	}
	natsProc.stop(t, 20*time.Second)
}

func connectWhenUp(t *testing.T, url string) *nats.Conn {
	t.Helper()
	var nc *nats.Conn
	eventually(t, 20*time.Second, "nats-server to accept connections", func() bool {
		c, err := nats.Connect(url)
		if err != nil {
			return false
		}
		nc = c
		return true
	})
	t.Cleanup(nc.Close)
	return nc
}

type rollStatus struct {
	Version   int64 `json:"policy_version"`
	Published int64 `json:"episodes_published"`
}

func rolloutStatus(t *testing.T, nc *nats.Conn) rollStatus {
	msg, err := nc.Request(proto.SubjectStatus("rollout"), nil, 2*time.Second)
	if err != nil {
		return rollStatus{Version: -1}
	}
	var body struct {
		Status rollStatus `json:"status"`
	}
	if err := json.Unmarshal(msg.Data, &body); err != nil {
		t.Fatalf("rollout status %q: %v", msg.Data, err)
	}
	return body.Status
}

func readTrainBatches(t *testing.T, ctx context.Context, js jetstream.JetStream) ([]string, map[string][]string) {
	t.Helper()
	var ids []string
	eps := map[string][]string{}
	forEach(t, ctx, js, proto.StreamTrain, func(data []byte) {
		var tb proto.TrainBatch
		if err := codec.Unmarshal(data, &tb); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tb.ID)
		for _, e := range tb.Episodes {
			eps[tb.ID] = append(eps[tb.ID], e.Episode.ID)
		}
	})
	return ids, eps
}

func readAppliedBatches(t *testing.T, ctx context.Context, js jetstream.JetStream) []proto.TrainStep {
	t.Helper()
	var out []proto.TrainStep
	forEach(t, ctx, js, proto.StreamEvents, func(data []byte) {
		var ev proto.TrainStep
		if err := codec.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	})
	return out
}

func forEach(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, fn func([]byte)) {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("%s seq %d: %v", stream, seq, err)
		}
		fn(m.Data)
	}
}

func versionsOf(applied []proto.TrainStep, id string) []int64 {
	var v []int64
	for _, a := range applied {
		if a.BatchID == id {
			v = append(v, a.Version)
		}
	}
	return v
}
