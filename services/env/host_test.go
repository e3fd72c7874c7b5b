package env_test

import (
	"errors"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
)

var eventually = bustest.Eventually

var testCtx = bustest.Ctx

type fixture struct {
	url string
	nc  *nats.Conn
	// unbatched makes client() call singly instead of in batches.
	unbatched bool
}

// bothWays runs a test once with a client that batches its calls and once with one that calls singly,
// each on a server of its own, so the host's batch endpoints and its single ones answer the same.
func bothWays(t *testing.T, test func(t *testing.T, f *fixture)) {
	for _, unbatched := range []bool{false, true} {
		name := "batched"
		if unbatched {
			name = "single"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.unbatched = unbatched
			test(t, f)
		})
	}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	f := &fixture{url: srv.URL()}
	f.nc = f.conn(t)
	return f
}

func (f *fixture) conn(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(testCtx(t), f.url, "env-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// host runs an env host on a connection of its own; stop ends it and waits for Run.
type host struct {
	*env.Host
	stop func()
}

func (f *fixture) startHost(t *testing.T, cfg env.Config, families task.Registry) *host {
	t.Helper()
	if families == nil {
		families = builtin.Registry()
	}
	h, err := env.New(cfg, env.Deps{Conn: f.conn(t), Families: families, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return &host{Host: h, stop: runHost(t, h)}
}

// runHost runs h until the test ends (or stop is called) once it serves.
func runHost(t *testing.T, h *env.Host) (stop func()) {
	t.Helper()
	stop = bustest.Run(t, "env host", 10*time.Second, h.Run)
	eventually(t, 10*time.Second, "the host to serve", h.Running)
	return stop
}

func (f *fixture) client(t *testing.T) *envclient.Client {
	c := envclient.New(f.conn(t), envclient.Config{CallTimeout: 5 * time.Second, StartRetries: 1, Unbatched: f.unbatched})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func startReq(seed uint64) proto.EnvStartRequest {
	return proto.EnvStartRequest{Task: alfworld.Name, Split: proto.SplitTrain, Seed: seed, EpisodeID: "e-1"}
}

// The host plays the instance (split, seed) names: the scripted solver of a local copy wins it over NATS.
func TestStartStepToTheEnd(t *testing.T) { bothWays(t, testStartStepToTheEnd) }

func testStartStepToTheEnd(t *testing.T, f *fixture) {
	h := f.startHost(t, env.Config{}, nil)
	c := f.client(t)
	ctx := testCtx(t)
	const seed = 11
	local, open, err := task.NewSession(alfworld.New(), proto.SplitTrain, seed)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Start(ctx, startReq(seed))
	if err != nil {
		t.Fatal(err)
	}
	if rep.HostID != h.ID() || !strings.HasPrefix(rep.SessionID, h.ID()+"-") {
		t.Fatalf("session %q on host %q, want a session id that names host %q", rep.SessionID, rep.HostID, h.ID())
	}
	if rep.Instruction != open.Instruction || rep.Observation != open.Observation || len(rep.Admissible) != len(open.Admissible) {
		t.Fatalf("opening differs from the local instance's:\n got %q / %q\nwant %q / %q", rep.Instruction, rep.Observation, open.Instruction, open.Observation)
	}
	if rep.MaxTurns != alfworld.MaxTurns || len(rep.Tools) != 1 || rep.Tools[0].Name != alfworld.ToolName ||
		len(rep.Messages) != 2 || rep.Messages[0].Role != "system" || rep.Messages[1].Content != open.Observation {
		t.Fatalf("start reply = %+v", rep)
	}
	if h.Active() != 1 {
		t.Fatalf("active sessions = %d, want 1", h.Active())
	}
	for turn := 1; ; turn++ {
		call := local.Solve()
		want, err := local.Step(call)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Step(ctx, rep.HostID, rep.SessionID, call)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if got.Observation != want.Observation || got.Done != want.Done || got.Status != want.Status || got.Reward != want.Reward || got.Turn != turn {
			t.Fatalf("turn %d: host answered %+v, local instance %+v", turn, got, want)
		}
		if got.Done {
			if got.Status != proto.StatusCompleted || got.Reward != 1 {
				t.Fatalf("the solver ended with %s, reward %v", got.Status, got.Reward)
			}
			break
		}
		if turn > alfworld.MaxTurns {
			t.Fatal("no end after the turn limit")
		}
	}
	// A finished session is gone.
	if h.Active() != 0 {
		t.Fatalf("active sessions after the end = %d, want 0", h.Active())
	}
	if _, err := c.Step(ctx, rep.HostID, rep.SessionID, local.Solve()); !errors.Is(err, proto.ErrUnknownSession) {
		t.Fatalf("step after the end: %v, want ErrUnknownSession", err)
	}
}

func TestCancel(t *testing.T) { bothWays(t, testCancel) }

func testCancel(t *testing.T, f *fixture) {
	h := f.startHost(t, env.Config{}, nil)
	c := f.client(t)
	ctx := testCtx(t)
	rep, err := c.Start(ctx, startReq(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, rep.HostID, rep.SessionID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if h.Active() != 0 {
		t.Fatalf("active sessions after cancel = %d", h.Active())
	}
	if _, err := c.Step(ctx, rep.HostID, rep.SessionID, rep.Admissible[0]); !errors.Is(err, proto.ErrUnknownSession) {
		t.Fatalf("step after cancel: %v, want ErrUnknownSession", err)
	}
	if err := c.Cancel(ctx, rep.HostID, rep.SessionID); !errors.Is(err, proto.ErrUnknownSession) {
		t.Fatalf("second cancel: %v, want ErrUnknownSession", err)
	}
}

func TestRefusals(t *testing.T) { bothWays(t, testRefusals) }

func testRefusals(t *testing.T, f *fixture) {
	h := f.startHost(t, env.Config{}, nil)
	c := f.client(t)
	ctx := testCtx(t)
	tests := []struct {
		name         string
		givenCall    func() error
		expectedErr  error
		expectedText string
	}{
		{"unknown task", func() error {
			_, err := c.Start(ctx, proto.EnvStartRequest{Task: "chess", Split: proto.SplitTrain})
			return err
		}, proto.ErrUnknownTask, "alfworld"},
		{"unknown split", func() error {
			_, err := c.Start(ctx, proto.EnvStartRequest{Task: alfworld.Name, Split: "test"})
			return err
		}, proto.ErrUnknownSplit, `"test"`},
		{"unknown session", func() error {
			_, err := c.Step(ctx, h.ID(), h.ID()+"-999", proto.ToolCall{Name: alfworld.ToolName, Arguments: `{"action":"look"}`})
			return err
		}, proto.ErrUnknownSession, h.ID() + "-999"},
		{"cancel of an unknown session", func() error { return c.Cancel(ctx, h.ID(), "nope") }, proto.ErrUnknownSession, "nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.givenCall()
			if !errors.Is(err, tc.expectedErr) {
				t.Fatalf("error = %v, want %v", err, tc.expectedErr)
			}
			if !strings.Contains(err.Error(), tc.expectedText) {
				t.Fatalf("error %q does not say %q", err, tc.expectedText)
			}
		})
	}
	if h.Active() != 0 {
		t.Fatalf("refused starts hold %d sessions", h.Active())
	}
	// Refusals are a healthy host: its breaker stays closed.
	if st := c.Breakers().State(h.ID()); st.String() != "closed" {
		t.Fatalf("breaker after refusals = %v", st)
	}
}

// A bad tool call is the agent's mistake: it gets an observation that says what is wrong, and costs a turn.
func TestBadToolCallGetsAnErrorObservation(t *testing.T) {
	bothWays(t, testBadToolCallGetsAnErrorObservation)
}

func testBadToolCallGetsAnErrorObservation(t *testing.T, f *fixture) {
	f.startHost(t, env.Config{}, nil)
	c := f.client(t)
	ctx := testCtx(t)
	rep, err := c.Start(ctx, startReq(3))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		givenCall        proto.ToolCall
		expectedObsMatch string
	}{
		{proto.ToolCall{Name: "rm_rf", Arguments: `{}`}, "unknown tool"},
		{proto.ToolCall{Name: alfworld.ToolName, Arguments: `not json`}, "bad arguments"},
		{proto.ToolCall{Name: alfworld.ToolName, Arguments: `{"action": 7}`}, "bad arguments"},
		{proto.ToolCall{Name: alfworld.ToolName, Arguments: `{"action": "fly to the moon"}`}, "not admissible"},
	}
	for i, tc := range tests {
		got, err := c.Step(ctx, rep.HostID, rep.SessionID, tc.givenCall)
		if err != nil {
			t.Fatalf("call %+v: error %v, want an observation", tc.givenCall, err)
		}
		if !strings.Contains(got.Observation, tc.expectedObsMatch) || got.Done || got.Status != proto.StatusRunning ||
			got.Turn != i+1 || got.Metrics["invalid_call"] != 1 || len(got.Admissible) == 0 {
			t.Fatalf("call %+v: reply %+v, want a running turn %d whose observation says %q", tc.givenCall, got, i+1, tc.expectedObsMatch)
		}
	}
}

func TestCapacity(t *testing.T) { bothWays(t, testCapacity) }

func testCapacity(t *testing.T, f *fixture) {
	h := f.startHost(t, env.Config{Capacity: 2}, nil)
	c := f.client(t)
	ctx := testCtx(t)
	var sessions []*proto.EnvStartReply
	for i := range 2 {
		rep, err := c.Start(ctx, startReq(uint64(i)))
		if err != nil {
			t.Fatalf("start %d of 2: %v", i+1, err)
		}
		sessions = append(sessions, rep)
	}
	if _, err := c.Start(ctx, startReq(3)); !errors.Is(err, proto.ErrHostFull) {
		t.Fatalf("third start: %v, want ErrHostFull", err)
	}
	// On the wire: a 503 in the micro error headers.
	data, err := codec.Marshal(proto.EnvStartRequest{Schema: proto.SchemaVersion, Task: alfworld.Name, Split: proto.SplitTrain}, 0)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := f.nc.Request(proto.SubjectEnvStart, data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "503" {
		t.Fatalf("error code %q, want 503", code)
	}
	if h.Active() != 2 {
		t.Fatalf("active = %d, want 2", h.Active())
	}
	// A freed place can be taken again.
	if err := c.Cancel(ctx, sessions[0].HostID, sessions[0].SessionID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, startReq(4)); err != nil {
		t.Fatalf("start after a cancel: %v", err)
	}
}

func TestIdleSessionsExpire(t *testing.T) {
	f := newFixture(t)
	h := f.startHost(t, env.Config{IdleTimeout: 3 * time.Second}, nil) // long beside the busy session's 300ms calls
	c := f.client(t)
	ctx := testCtx(t)
	idle, err := c.Start(ctx, startReq(1))
	if err != nil {
		t.Fatal(err)
	}
	busy, err := c.Start(ctx, startReq(2))
	if err != nil {
		t.Fatal(err)
	}
	look := proto.ToolCall{Name: alfworld.ToolName, Arguments: `{"action":"look"}`}
	// Keep one session busy (a call every 300ms) while the other sits idle.
	eventually(t, 20*time.Second, "the idle session to expire", func() bool {
		if _, err := c.Step(ctx, busy.HostID, busy.SessionID, look); err != nil {
			t.Fatalf("busy session: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
		return h.Active() == 1
	})
	if _, err := c.Step(ctx, idle.HostID, idle.SessionID, look); !errors.Is(err, proto.ErrUnknownSession) {
		t.Fatalf("step of the expired session: %v, want ErrUnknownSession", err)
	}
	if _, err := c.Step(ctx, busy.HostID, busy.SessionID, look); err != nil {
		t.Fatalf("the busy session expired too: %v", err)
	}
}

func TestSessionIDsAreUniqueAcrossHosts(t *testing.T) {
	f := newFixture(t)
	// Capacity 5 each: ten starts must use both hosts.
	a := f.startHost(t, env.Config{Capacity: 5}, nil)
	b := f.startHost(t, env.Config{Capacity: 5}, nil)
	if a.ID() == b.ID() {
		t.Fatalf("two hosts got the same default id %q", a.ID())
	}
	c := envclient.New(f.conn(t), envclient.Config{CallTimeout: 5 * time.Second, StartRetries: 50})
	seen := map[string]bool{}
	perHost := map[string]int{}
	for i := range 10 {
		rep, err := c.Start(testCtx(t), startReq(uint64(i)))
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if seen[rep.SessionID] {
			t.Fatalf("session id %q given twice", rep.SessionID)
		}
		seen[rep.SessionID] = true
		if !strings.HasPrefix(rep.SessionID, rep.HostID+"-") {
			t.Fatalf("session %q does not name its host %q", rep.SessionID, rep.HostID)
		}
		perHost[rep.HostID]++
	}
	if perHost[a.ID()] != 5 || perHost[b.ID()] != 5 || a.Active() != 5 || b.Active() != 5 {
		t.Fatalf("sessions per host = %v, want 5 on each of %s and %s", perHost, a.ID(), b.ID())
	}
}

func TestMalformedRequestsGet400(t *testing.T) {
	f := newFixture(t)
	h := f.startHost(t, env.Config{HostID: "h1"}, nil)
	oldSchema, err := codec.Marshal(proto.EnvStartRequest{Schema: 99, Task: alfworld.Name}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		givenSubject string
		givenData    []byte
		expectedCode string
		expectedDesc string
	}{
		{"garbage start", proto.SubjectEnvStart, []byte("hello, env"), "400", proto.ErrMalformed.Error()},
		{"empty start", proto.SubjectEnvStart, nil, "400", proto.ErrMalformed.Error()},
		{"JSON step", proto.SubjectEnvStep("h1"), []byte(`{"session_id":"h1-1"}`), "400", proto.ErrMalformed.Error()},
		{"garbage cancel", proto.SubjectEnvCancel("h1"), []byte{0xc1, 0xc1}, "400", proto.ErrMalformed.Error()},
		{"future schema", proto.SubjectEnvStart, oldSchema, "400", proto.ErrSchema.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := f.nc.Request(tc.givenSubject, tc.givenData, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code := msg.Header.Get(micro.ErrorCodeHeader); code != tc.expectedCode {
				t.Fatalf("error code %q, want %q", code, tc.expectedCode)
			}
			if desc := msg.Header.Get(micro.ErrorHeader); !strings.HasPrefix(desc, tc.expectedDesc) {
				t.Fatalf("error description %q, want it to start with %q", desc, tc.expectedDesc)
			}
		})
	}
	// The host keeps serving.
	rep, err := f.client(t).Start(testCtx(t), startReq(5))
	if err != nil || rep.HostID != "h1" || !h.Running() {
		t.Fatalf("start after malformed requests: %+v, %v", rep, err)
	}
}

func TestShutdownStopsServing(t *testing.T) {
	f := newFixture(t)
	h := f.startHost(t, env.Config{}, nil)
	c := f.client(t)
	if _, err := c.Start(testCtx(t), startReq(1)); err != nil {
		t.Fatal(err)
	}
	h.stop()
	if h.Running() {
		t.Fatal("host still running after Run returned")
	}
	// The endpoints drain asynchronously: until they are gone a request is refused as shutting down, never
	// served; then nobody answers.
	eventually(t, 10*time.Second, "the host's endpoints to go", func() bool {
		_, err := c.Start(testCtx(t), startReq(2))
		if !errors.Is(err, proto.ErrEnvUnavailable) && !errors.Is(err, proto.ErrShuttingDown) {
			t.Fatalf("start after shutdown: %v, want ErrEnvUnavailable or ErrShuttingDown", err)
		}
		return errors.Is(err, proto.ErrEnvUnavailable)
	})
}

// blockingFamily is alfworld whose steps wait until release is closed: a slow environment.
type blockingFamily struct {
	task.Family
	maxTurns int // 0: alfworld's
	// blockSeed, if set, makes only the instance of that seed block; the others step at once.
	blockSeed uint64
	release   chan struct{}
	entered   chan struct{}
	stepped   chan struct{}
}

func (f *blockingFamily) MaxTurns() int {
	if f.maxTurns > 0 {
		return f.maxTurns
	}
	return f.Family.MaxTurns()
}

type blockingInstance struct {
	task.Instance
	f    *blockingFamily
	seed uint64
}

func (f *blockingFamily) New(split string, seed uint64) (task.Instance, error) {
	inst, err := f.Family.New(split, seed)
	return &blockingInstance{Instance: inst, f: f, seed: seed}, err
}

func (i *blockingInstance) Step(call proto.ToolCall) task.Result {
	if i.f.blockSeed != 0 && i.seed != i.f.blockSeed {
		return i.Instance.Step(call)
	}
	i.f.entered <- struct{}{}
	<-i.f.release
	defer func() { i.f.stepped <- struct{}{} }()
	return i.Instance.Step(call)
}

func newBlockingFamily() *blockingFamily {
	return &blockingFamily{Family: alfworld.New(), release: make(chan struct{}), entered: make(chan struct{}, 8), stepped: make(chan struct{}, 8)}
}

func wait(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A step slower than CallTimeout fails with ErrEnvTimeout, and the session stays failed.
func TestSlowStepTimesOut(t *testing.T) { bothWays(t, testSlowStepTimesOut) }

func testSlowStepTimesOut(t *testing.T, f *fixture) {
	fam := newBlockingFamily()
	h := f.startHost(t, env.Config{CallTimeout: 50 * time.Millisecond}, task.Registry{alfworld.Name: fam})
	c := f.client(t)
	ctx := testCtx(t)
	rep, err := c.Start(ctx, startReq(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Step(ctx, rep.HostID, rep.SessionID, rep.Admissible[0]); !errors.Is(err, proto.ErrEnvTimeout) {
		t.Fatalf("slow step: %v, want ErrEnvTimeout", err)
	}
	wait(t, fam.entered, "the slow step to start")
	close(fam.release)
	wait(t, fam.stepped, "the slow step to finish")
	if _, err := c.Step(ctx, rep.HostID, rep.SessionID, rep.Admissible[0]); !errors.Is(err, proto.ErrEnvTimeout) {
		t.Fatalf("step of a timed-out session: %v, want its ErrEnvTimeout again", err)
	}
	if h.Active() != 1 {
		t.Fatalf("active = %d", h.Active())
	}
}

// Cancelling a session whose last step timed out while that step is still running in the background must
// not touch the session's state concurrently with it (run with -race). With a turn limit of 1 the late step
// ends the session (it writes the session's done flag) while the cancel closes it.
func TestCancelWhileTimedOutStepStillRuns(t *testing.T) {
	bothWays(t, testCancelWhileTimedOutStepStillRuns)
}

func testCancelWhileTimedOutStepStillRuns(t *testing.T, f *fixture) {
	fam := newBlockingFamily()
	fam.maxTurns = 1
	h := f.startHost(t, env.Config{CallTimeout: 50 * time.Millisecond}, task.Registry{alfworld.Name: fam})
	c := f.client(t)
	ctx := testCtx(t)
	rep, err := c.Start(ctx, startReq(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Step(ctx, rep.HostID, rep.SessionID, rep.Admissible[0]); !errors.Is(err, proto.ErrEnvTimeout) {
		t.Fatalf("slow step: %v, want ErrEnvTimeout", err)
	}
	wait(t, fam.entered, "the slow step to start")
	close(fam.release) // the late step goes on while the session is cancelled
	if err := c.Cancel(ctx, rep.HostID, rep.SessionID); err != nil {
		t.Fatal(err)
	}
	wait(t, fam.stepped, "the slow step to finish")
	if h.Active() != 0 {
		t.Fatalf("active = %d after cancel", h.Active())
	}
	if _, err := c.Step(ctx, rep.HostID, rep.SessionID, rep.Admissible[0]); !errors.Is(err, proto.ErrUnknownSession) {
		t.Fatalf("step after cancel: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name       string
		givenCfg   env.Config
		givenDeps  env.Deps
		expectedOK bool
	}{
		{"defaults", env.Config{}, env.Deps{Conn: f.nc, Families: builtin.Registry()}, true},
		{"host id with a dot", env.Config{HostID: "a.b"}, env.Deps{Conn: f.nc, Families: builtin.Registry()}, false},
		{"host id with a wildcard", env.Config{HostID: "a*"}, env.Deps{Conn: f.nc, Families: builtin.Registry()}, false},
		{"negative capacity", env.Config{Capacity: -1}, env.Deps{Conn: f.nc, Families: builtin.Registry()}, false},
		{"idle timeout under 1s", env.Config{IdleTimeout: 500 * time.Millisecond}, env.Deps{Conn: f.nc, Families: builtin.Registry()}, false},
		{"idle timeout of 1s", env.Config{IdleTimeout: time.Second}, env.Deps{Conn: f.nc, Families: builtin.Registry()}, true},
		{"no families", env.Config{}, env.Deps{Conn: f.nc}, false},
		{"no connection", env.Config{}, env.Deps{Families: builtin.Registry()}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.givenDeps.Log = zerolog.Nop()
			_, err := env.New(tc.givenCfg, tc.givenDeps)
			if (err == nil) != tc.expectedOK {
				t.Fatalf("New error = %v, want ok %v", err, tc.expectedOK)
			}
		})
	}
}
