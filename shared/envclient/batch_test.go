package envclient_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/breaker"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/nats-io/nats.go/micro"
	"github.com/sony/gobreaker/v2"
)

// serveBatches answers a step batch subject on its own connection: answer returns each step's result,
// and the results go back in reply messages of at most perMessage results each, last ones first.
func serveBatches(t *testing.T, url, subject string, perMessage int, answer func(proto.EnvStepRequest) proto.EnvBatchResult) (requests *atomic.Int64) {
	t.Helper()
	nc := connect(t, url)
	requests = &atomic.Int64{}
	serve(t, url, subject, func(r micro.Request) {
		requests.Add(1)
		var req proto.EnvStepBatch
		if err := codec.Unmarshal(r.Data(), &req); err != nil {
			refuse(r, proto.ErrMalformed, err.Error())
			return
		}
		var results []proto.EnvBatchResult
		for i, s := range req.Steps {
			res := answer(s)
			res.Index = i
			results = append(results, res)
		}
		for end := len(results); end > 0; end -= perMessage {
			b, err := codec.Marshal(proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: results[max(0, end-perMessage):end]}, 0)
			if err != nil {
				t.Error(err)
				return
			}
			_ = nc.Publish(r.Reply(), b)
		}
	})
	return requests
}

// callConcurrently runs call for sessions hb-0 ... hb-(callers-1) at once and reports every error it returns.
func callConcurrently(t *testing.T, callers int, call func(session string) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := call(fmt.Sprintf("hb-%d", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func stepOK(s proto.EnvStepRequest) proto.EnvBatchResult {
	return proto.EnvBatchResult{Step: &proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "seen by " + s.SessionID, Status: proto.StatusRunning, Turn: 1}}
}

// Calls made at once travel in batches, and every caller gets its own result, whichever reply message
// of its batch carries it.
func TestBatchedStepsReachTheirCallers(t *testing.T) {
	url := server(t)
	requests := serveBatches(t, url, proto.SubjectEnvStepBatch("hb"), 3, stepOK)
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	const callers = 64
	callConcurrently(t, callers, func(session string) error {
		rep, err := c.Step(testCtx(t), "hb", session, proto.ToolCall{Name: "x", Arguments: "{}"})
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", session, err)
		case rep.Observation != "seen by "+session:
			return fmt.Errorf("%s got the reply of another session: %q", session, rep.Observation)
		}
		return nil
	})
	st := c.BatchStats()
	if st.Calls != callers || st.Batches != requests.Load() || st.Batches < 1 || st.Batches > callers {
		t.Fatalf("stats %+v with %d batch requests served, want %d calls in at most %d batches", st, requests.Load(), callers, callers)
	}
	if st.Waiting != 0 {
		t.Fatalf("%d batches still wait after every call returned", st.Waiting)
	}
}

// Sessions that think between steps (their policy choosing) still step together: a batch waits for the
// sessions that had a result and have not called again, so every turn of the callers goes in one message.
func TestBatchWaitsForSessionsThatHadResults(t *testing.T) {
	url := server(t)
	const callers, turns = 16, 5
	requests := serveBatches(t, url, proto.SubjectEnvStepBatch("hb"), callers, stepOK)
	// A linger far longer than a think, so that a loaded machine does not make the batches smaller.
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 5 * time.Second, MaxLinger: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	// Each caller plays its turns one after another, thinking before each. Nothing is counted until a turn
	// of all of them went in one batch: until then nobody had a result, or some had theirs from an earlier
	// batch of the same turn (a loaded machine splits a turn that nothing waits for), and only the sessions
	// of a reply are waited for.
	play := func(turns []int) {
		callConcurrently(t, callers, func(session string) error {
			for _, turn := range turns {
				time.Sleep(50 * time.Microsecond) // the policy choosing
				if _, err := c.Step(ctx, "hb", session, proto.ToolCall{Name: "x"}); err != nil {
					return fmt.Errorf("%s turn %d: %w", session, turn, err)
				}
			}
			return nil
		})
	}
	for warm := 1; ; warm++ {
		before := c.BatchStats()
		play([]int{1})
		if c.BatchStats().Batches-before.Batches == 1 {
			break
		}
		if warm == 20 {
			t.Fatalf("no turn of %d callers went in one batch in %d turns", callers, warm)
		}
	}
	before := c.BatchStats()
	play([]int{2, 3, 4, 5})
	after := c.BatchStats()
	calls, batches := after.Calls-before.Calls, after.Batches-before.Batches
	if calls != callers*(turns-1) || batches != turns-1 {
		t.Fatalf("turns 2..%d of %d callers: %d calls in %d batches (%d requests served in all), want %d calls in %d batches, one a turn",
			turns, callers, calls, batches, requests.Load(), callers*(turns-1), turns-1)
	}
}

// lingeringClient is a client of a server whose host "hb" serves step batches, its batches waiting up to
// linger for the sessions expected.
func lingeringClient(t *testing.T, linger time.Duration) *envclient.Client {
	t.Helper()
	url := server(t)
	serveBatches(t, url, proto.SubjectEnvStepBatch("hb"), 8, stepOK)
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 5 * time.Second, MaxLinger: linger})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// stepInTurn steps the sessions on host one after another. Each has a result, and each one's batch waits
// MaxLinger for the session before it (which had a result and does not call), then forgets it: when it
// returns, the last session alone is expected to call again. (Stepped at once, the sessions would land in
// one batch or in two as the scheduler has it, and which is expected after would vary.)
func stepInTurn(t *testing.T, c *envclient.Client, host string, sessions ...string) {
	t.Helper()
	for _, s := range sessions {
		if _, err := c.Step(testCtx(t), host, s, proto.ToolCall{Name: "x"}); err != nil {
			t.Fatal(err)
		}
	}
}

// A session that had a result and never calls again delays the next batch by MaxLinger once, not forever.
func TestBatchStopsWaitingForASessionThatLeft(t *testing.T) {
	const linger = 2 * time.Second // long beside a step's round trip on a busy machine
	c := lingeringClient(t, linger)
	ctx := testCtx(t)
	stepInTurn(t, c, "hb", "stays", "leaves")
	// "leaves" had a result and will not call again: the next batch waits for it, once.
	for i, want := range []string{"waits for the session that left", "waits for no one"} {
		began := time.Now()
		if _, err := c.Step(ctx, "hb", "stays", proto.ToolCall{Name: "x"}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		if (i == 0) != (took >= linger) {
			t.Fatalf("step %d took %v with MaxLinger %v: want one that %s", i+1, took, linger, want)
		}
	}
}

// A result that carries an error is the same catalogued error as a single call's error reply: refusals
// leave the host's breaker closed, timeouts open it.
func TestBatchResultErrorsAreCatalogued(t *testing.T) {
	url := server(t)
	serveBatches(t, url, proto.SubjectEnvStepBatch("hb"), 8, func(s proto.EnvStepRequest) proto.EnvBatchResult {
		switch s.SessionID {
		case "gone":
			return proto.EnvBatchResult{Error: proto.ErrUnknownSession.Error() + `: "gone" on host hb`, Code: "404"}
		case "slow":
			return proto.EnvBatchResult{Error: proto.ErrEnvTimeout.Error() + ": step took longer than 4m0s", Code: "504"}
		case "empty":
			return proto.EnvBatchResult{} // neither a reply nor an error
		}
		return stepOK(s)
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 5 * time.Second, Breaker: breaker.Settings{ConsecutiveFailures: 2, OpenFor: time.Minute}})
	ctx := testCtx(t)
	for range 3 {
		_, err := c.Step(ctx, "hb", "gone", proto.ToolCall{Name: "x"})
		if !errors.Is(err, proto.ErrUnknownSession) || !strings.Contains(err.Error(), `"gone" on host hb`) {
			t.Fatalf("refused step: %v, want ErrUnknownSession with its detail", err)
		}
	}
	if st := c.Breakers().State("hb"); st != gobreaker.StateClosed {
		t.Fatalf("breaker after refusals = %v, want closed", st)
	}
	if _, err := c.Step(ctx, "hb", "empty", proto.ToolCall{Name: "x"}); !errors.Is(err, proto.ErrMalformed) {
		t.Fatalf("empty result: %v, want ErrMalformed", err)
	}
	if st := c.BatchStats(); st.Malformed != 1 {
		t.Fatalf("malformed results counted %d, want 1", st.Malformed)
	}
	for range 2 {
		if _, err := c.Step(ctx, "hb", "slow", proto.ToolCall{Name: "x"}); !errors.Is(err, proto.ErrEnvTimeout) {
			t.Fatalf("timed-out step: %v, want ErrEnvTimeout", err)
		}
	}
	if st := c.Breakers().State("hb"); st != gobreaker.StateOpen {
		t.Fatalf("breaker after 2 timeouts = %v, want open", st)
	}
}

// A batch reply that is not msgpack, or a whole-batch error reply, fails the calls of the batch with a
// catalogued error; a host that never answers times them out, and the client forgets the batch.
func TestBadBatchRepliesFailTheirCalls(t *testing.T) {
	url := server(t)
	nc := connect(t, url)
	serve(t, url, proto.SubjectEnvStepBatch("garbage"), func(r micro.Request) { _ = nc.Publish(r.Reply(), []byte("not msgpack")) })
	serve(t, url, proto.SubjectEnvStepBatch("stopping"), func(r micro.Request) { refuse(r, proto.ErrShuttingDown, "host stopping") })
	serve(t, url, proto.SubjectEnvStepBatch("mute"), func(micro.Request) {})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 200 * time.Millisecond, Breaker: breaker.Settings{ConsecutiveFailures: 100}})
	ctx := testCtx(t)
	tests := []struct {
		givenHost   string
		expectedErr error
	}{
		{"garbage", proto.ErrMalformed},
		{"stopping", proto.ErrShuttingDown},
		{"mute", proto.ErrEnvTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.givenHost, func(t *testing.T) {
			if _, err := c.Step(ctx, tc.givenHost, "s", proto.ToolCall{Name: "x"}); !errors.Is(err, tc.expectedErr) {
				t.Fatalf("step: %v, want %v", err, tc.expectedErr)
			}
		})
	}
	if st := c.BatchStats(); st.Malformed != 1 || st.Waiting != 0 || st.Batches != 3 {
		t.Fatalf("stats %+v, want 3 batches, 1 malformed reply, none waiting", st)
	}
}

// A host that serves no batch subject (an older host, or one in another language) is called singly, and
// the client does not try batches on it again for a while.
func TestHostWithoutBatchesIsCalledSingly(t *testing.T) {
	url := server(t)
	var single atomic.Int64
	serve(t, url, proto.SubjectEnvStep("old"), func(r micro.Request) {
		single.Add(1)
		respond(t, r, proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "single", Turn: 1})
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: time.Second})
	ctx := testCtx(t)
	for i := range 3 {
		rep, err := c.Step(ctx, "old", "s", proto.ToolCall{Name: "x"})
		if err != nil || rep.Observation != "single" {
			t.Fatalf("step %d: %+v, %v", i, rep, err)
		}
	}
	if st := c.BatchStats(); st.Batches != 1 || single.Load() != 3 {
		t.Fatalf("%d batches tried and %d single calls, want 1 and 3", st.Batches, single.Load())
	}
	// With Unbatched, no batch is tried at all.
	u := envclient.New(connect(t, url), envclient.Config{CallTimeout: time.Second, Unbatched: true})
	if _, err := u.Step(ctx, "old", "s", proto.ToolCall{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if st := u.BatchStats(); st.Batches != 0 {
		t.Fatalf("an unbatched client sent %d batches", st.Batches)
	}
}

// Calls given up by their callers (timeout) leave nothing behind once their batch answers late.
func TestLateBatchReplyIsDropped(t *testing.T) {
	url := server(t)
	release := make(chan struct{})
	nc := connect(t, url)
	serve(t, url, proto.SubjectEnvStepBatch("late"), func(r micro.Request) {
		reply := r.Reply()
		go func() {
			<-release
			b, _ := codec.Marshal(proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: []proto.EnvBatchResult{stepOK(proto.EnvStepRequest{SessionID: "s"})}}, 0)
			_ = nc.Publish(reply, b)
		}()
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: time.Second, Breaker: breaker.Settings{ConsecutiveFailures: 100}})
	if _, err := c.Step(testCtx(t), "late", "s", proto.ToolCall{Name: "x"}); !errors.Is(err, proto.ErrEnvTimeout) {
		t.Fatalf("step: %v, want ErrEnvTimeout", err)
	}
	if st := c.BatchStats(); st.Waiting != 0 {
		t.Fatalf("%d batches wait after their only call gave up", st.Waiting)
	}
	close(release)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The client goes on working, and the late reply, which answers no one, leaves nothing behind.
	if _, err := c.Step(testCtx(t), "late", "s2", proto.ToolCall{Name: "x"}); err != nil {
		t.Fatalf("step after a late reply: %v", err)
	}
	if st := c.BatchStats(); st.Waiting != 0 || st.Batches != 2 {
		t.Fatalf("stats %+v, want 2 batches and none waiting", st)
	}
}

// A start answered by a host whose breaker is open is given back to it and tried again, so no episode
// starts on a host all of whose steps would be refused.
func TestStartOnAHostWithAnOpenBreakerIsTriedElsewhere(t *testing.T) {
	url := server(t)
	var starts, cancels atomic.Int64
	serve(t, url, proto.SubjectEnvStart, func(r micro.Request) {
		host := "h-ok"
		if starts.Add(1) <= 2 {
			host = "h-open"
		}
		respond(t, r, proto.EnvStartReply{Schema: proto.SchemaVersion, SessionID: host + "-1", HostID: host})
	})
	serve(t, url, proto.SubjectEnvCancel("h-open"), func(r micro.Request) {
		cancels.Add(1)
		respond(t, r, proto.EnvCancelReply{Schema: proto.SchemaVersion})
	})
	serve(t, url, proto.SubjectEnvStep("h-open"), func(micro.Request) {}) // never answers
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: time.Second, StartRetries: 5,
		Breaker: breaker.Settings{ConsecutiveFailures: 2, OpenFor: time.Minute}})
	ctx := testCtx(t)
	for range 2 {
		if _, err := c.Step(ctx, "h-open", "s", proto.ToolCall{Name: "x"}); !errors.Is(err, proto.ErrEnvTimeout) {
			t.Fatalf("step: %v, want ErrEnvTimeout", err)
		}
	}
	if st := c.Breakers().State("h-open"); st != gobreaker.StateOpen {
		t.Fatalf("breaker = %v, want open", st)
	}
	rep, err := c.Start(ctx, proto.EnvStartRequest{Task: "db", Split: proto.SplitTrain})
	if err != nil || rep.HostID != "h-ok" {
		t.Fatalf("start: %+v, %v; want a session on h-ok", rep, err)
	}
	bustest.Eventually(t, 5*time.Second, "both sessions on h-open given back", func() bool { return cancels.Load() >= 2 })
	if cancels.Load() != 2 || c.BatchStats().StartsOnOpenHosts != 2 {
		t.Fatalf("%d cancels on h-open, %d counted; want both sessions it opened given back", cancels.Load(), c.BatchStats().StartsOnOpenHosts)
	}
}

// A session cancelled after a result will not call again: the next batch does not wait for it.
func TestBatchDoesNotWaitForACancelledSession(t *testing.T) {
	const linger = 2 * time.Second
	c := lingeringClient(t, linger)
	ctx := testCtx(t)
	stepInTurn(t, c, "hb", "stays", "cancelled")
	_ = c.Cancel(ctx, "hb", "cancelled") // no host serves cancels here: the client forgets the session all the same
	began := time.Now()
	if _, err := c.Step(ctx, "hb", "stays", proto.ToolCall{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took >= linger {
		t.Fatalf("the step after a cancel took %v: it waited MaxLinger (%v) for the cancelled session", took, linger)
	}
}
