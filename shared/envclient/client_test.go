package envclient_test

// These tests serve the env subjects with small NATS micro services on a real embedded server, so the
// client's transport, error headers, retries and breakers are exercised as they run against env hosts.
// The env host itself is tested through this client in services/env.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/breaker"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"github.com/sony/gobreaker/v2"
)

var testCtx = bustest.Ctx

func server(t *testing.T) string {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv.URL()
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(testCtx(t), url, "envclient-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// serve answers subject on its own connection with handler, as a micro endpoint (queue group as env hosts).
func serve(t *testing.T, url, subject string, handler func(micro.Request)) {
	t.Helper()
	nc := connect(t, url)
	svc, err := micro.AddService(nc, micro.Config{Name: "envclient-test", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := svc.AddEndpoint("e", micro.HandlerFunc(handler), micro.WithEndpointSubject(subject),
		micro.WithEndpointQueueGroup(proto.EnvQueueGroup)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func respond(t *testing.T, r micro.Request, v any) {
	b, err := codec.Marshal(v, 0)
	if err != nil {
		t.Error(err)
		return
	}
	_ = r.Respond(b)
}

func refuse(r micro.Request, err error, detail string) {
	_ = r.Error(proto.ErrorCodes[err], err.Error()+": "+detail, nil)
}

func TestStepMapsReplies(t *testing.T) {
	url := server(t)
	const host = "h1"
	var lastReq atomic.Pointer[proto.EnvStepRequest]
	serve(t, url, proto.SubjectEnvStep(host), func(r micro.Request) {
		var req proto.EnvStepRequest
		if err := codec.Unmarshal(r.Data(), &req); err != nil {
			refuse(r, proto.ErrMalformed, err.Error())
			return
		}
		lastReq.Store(&req)
		switch req.SessionID {
		case "ok":
			respond(t, r, proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "obs", Turn: 1, Status: proto.StatusRunning})
		case "gone":
			refuse(r, proto.ErrUnknownSession, `"gone" on host h1`)
		case "done":
			refuse(r, proto.ErrSessionDone, "after 3 turns")
		case "odd":
			_ = r.Error("418", "a teapot answered", nil)
		case "old-schema":
			respond(t, r, proto.EnvStepReply{Schema: 0})
		case "garbage":
			_ = r.Respond([]byte("not msgpack"))
		case "slow":
			time.Sleep(1500 * time.Millisecond)
			respond(t, r, proto.EnvStepReply{Schema: proto.SchemaVersion})
		}
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: time.Second,
		Breaker: breaker.Settings{ConsecutiveFailures: 100}})
	tests := []struct {
		givenSession string
		expectedErr  error
		expectedText string // a part of the error text that must survive the wire
	}{
		{givenSession: "ok"},
		{givenSession: "gone", expectedErr: proto.ErrUnknownSession, expectedText: `"gone" on host h1`},
		{givenSession: "done", expectedErr: proto.ErrSessionDone, expectedText: "after 3 turns"},
		{givenSession: "odd", expectedErr: proto.ErrInternal, expectedText: "teapot"},
		{givenSession: "old-schema", expectedErr: proto.ErrSchema},
		{givenSession: "garbage", expectedErr: proto.ErrMalformed},
		{givenSession: "slow", expectedErr: proto.ErrEnvTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.givenSession, func(t *testing.T) {
			call := proto.ToolCall{Name: "take_action", Arguments: `{"action":"look"}`}
			rep, err := c.Step(testCtx(t), host, tc.givenSession, call)
			if !errors.Is(err, tc.expectedErr) {
				t.Fatalf("Step error = %v, want %v", err, tc.expectedErr)
			}
			if tc.expectedText != "" && (err == nil || !strings.Contains(err.Error(), tc.expectedText)) {
				t.Fatalf("Step error %q lost the detail %q", err, tc.expectedText)
			}
			if tc.expectedErr != nil {
				return
			}
			if rep.Observation != "obs" || rep.Turn != 1 {
				t.Fatalf("Step reply = %+v", rep)
			}
			req := lastReq.Load()
			if req.Schema != proto.SchemaVersion || req.SessionID != "ok" || req.Call != call {
				t.Fatalf("host received %+v", req)
			}
		})
	}
}

func TestStepWithoutHostIsUnavailable(t *testing.T) {
	c := envclient.New(connect(t, server(t)), envclient.Config{CallTimeout: time.Second})
	_, err := c.Step(testCtx(t), "nobody", "s", proto.ToolCall{Name: "x"})
	if !errors.Is(err, proto.ErrEnvUnavailable) {
		t.Fatalf("err = %v, want ErrEnvUnavailable", err)
	}
	if err := c.Cancel(testCtx(t), "nobody", "s"); !errors.Is(err, proto.ErrEnvUnavailable) {
		t.Fatalf("Cancel err = %v, want ErrEnvUnavailable", err)
	}
}

func TestStepBreakerOpensOnTimeoutsNotRefusals(t *testing.T) {
	url := server(t)
	var calls atomic.Int64
	serve(t, url, proto.SubjectEnvStep("slow"), func(r micro.Request) {
		calls.Add(1)
		time.Sleep(1500 * time.Millisecond)
		respond(t, r, proto.EnvStepReply{Schema: proto.SchemaVersion})
	})
	serve(t, url, proto.SubjectEnvStep("strict"), func(r micro.Request) {
		calls.Add(1)
		refuse(r, proto.ErrUnknownSession, "no such session")
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 500 * time.Millisecond,
		Breaker: breaker.Settings{ConsecutiveFailures: 2, OpenFor: time.Minute}})
	ctx := testCtx(t)
	for range 5 {
		if _, err := c.Step(ctx, "strict", "s", proto.ToolCall{Name: "x"}); !errors.Is(err, proto.ErrUnknownSession) {
			t.Fatalf("strict host: %v", err)
		}
	}
	if st := c.Breakers().State("strict"); st != gobreaker.StateClosed {
		t.Fatalf("breaker of a host that refuses requests = %v, want closed", st)
	}
	for i := range 2 {
		if _, err := c.Step(ctx, "slow", "s", proto.ToolCall{Name: "x"}); !errors.Is(err, proto.ErrEnvTimeout) {
			t.Fatalf("slow host call %d: %v, want ErrEnvTimeout", i, err)
		}
	}
	if st := c.Breakers().State("slow"); st != gobreaker.StateOpen {
		t.Fatalf("breaker after 2 timeouts = %v, want open", st)
	}
	// The slow host answers one request at a time: its second timed-out request reaches the handler
	// late. Every request sent so far (5 refused, 2 timed out) is counted before the one the breaker holds.
	bustest.Eventually(t, 10*time.Second, "the requests sent so far at their hosts", func() bool { return calls.Load() == 7 })
	before := calls.Load()
	_, err := c.Step(ctx, "slow", "s", proto.ToolCall{Name: "x"})
	if !errors.Is(err, gobreaker.ErrOpenState) || !breaker.IsInfrastructure(err) {
		t.Fatalf("call through an open breaker: %v, want ErrOpenState", err)
	}
	if calls.Load() != before {
		t.Fatal("an open breaker still sent the request")
	}
}

func TestStartRetriesFullHosts(t *testing.T) {
	url := server(t)
	var tries atomic.Int64
	serve(t, url, proto.SubjectEnvStart, func(r micro.Request) {
		var req proto.EnvStartRequest
		if err := codec.Unmarshal(r.Data(), &req); err != nil {
			refuse(r, proto.ErrMalformed, err.Error())
			return
		}
		switch {
		case req.Task == "nope":
			refuse(r, proto.ErrUnknownTask, fmt.Sprintf("%q", req.Task))
		case tries.Add(1) <= 2:
			refuse(r, proto.ErrHostFull, "host h1 holds 2 sessions")
		default:
			respond(t, r, proto.EnvStartReply{Schema: proto.SchemaVersion, SessionID: "h1-1", HostID: "h1", Instruction: req.EpisodeID})
		}
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: time.Second, StartRetries: 3})
	ctx := testCtx(t)
	rep, err := c.Start(ctx, proto.EnvStartRequest{Task: "alfworld", Split: proto.SplitTrain, EpisodeID: "e-7"})
	if err != nil {
		t.Fatalf("Start after two full answers: %v", err)
	}
	if rep.SessionID != "h1-1" || rep.HostID != "h1" || rep.Instruction != "e-7" || tries.Load() != 3 {
		t.Fatalf("Start = %+v after %d tries, want session h1-1 on the third", rep, tries.Load())
	}
	// A refusal that another try cannot fix is returned at once.
	tries.Store(100)
	if _, err := c.Start(ctx, proto.EnvStartRequest{Task: "nope"}); !errors.Is(err, proto.ErrUnknownTask) {
		t.Fatalf("unknown task: %v", err)
	}
	// Hosts that stay full: the last refusal comes back after StartRetries more tries.
	tries.Store(-100)
	if _, err := c.Start(ctx, proto.EnvStartRequest{Task: "alfworld"}); !errors.Is(err, proto.ErrHostFull) {
		t.Fatalf("always full: %v, want ErrHostFull", err)
	}
	if got := tries.Load(); got != -100+4 {
		t.Fatalf("always full: %d tries, want 1 + StartRetries = 4", got+100)
	}
}

// A host that is shutting down refuses a start that another host of the queue group can take: Start tries
// again, as it does for a full host.
func TestStartRetriesHostsShuttingDown(t *testing.T) {
	url := server(t)
	var tries atomic.Int64
	serve(t, url, proto.SubjectEnvStart, func(r micro.Request) {
		if tries.Add(1) == 1 {
			refuse(r, proto.ErrShuttingDown, "")
			return
		}
		respond(t, r, proto.EnvStartReply{Schema: proto.SchemaVersion, SessionID: "h2-1", HostID: "h2"})
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: time.Second, StartRetries: 2})
	rep, err := c.Start(testCtx(t), proto.EnvStartRequest{Task: "alfworld"})
	if err != nil {
		t.Fatalf("Start after a host answered shutting down: %v", err)
	}
	if rep.SessionID != "h2-1" || tries.Load() != 2 {
		t.Fatalf("Start = %+v after %d tries", rep, tries.Load())
	}
}

func TestStartWithoutHosts(t *testing.T) {
	c := envclient.New(connect(t, server(t)), envclient.Config{CallTimeout: time.Second, StartRetries: 1})
	if _, err := c.Start(testCtx(t), proto.EnvStartRequest{Task: "alfworld"}); !errors.Is(err, proto.ErrEnvUnavailable) {
		t.Fatalf("err = %v, want ErrEnvUnavailable", err)
	}
}

func TestStartRefusesOversizedRequest(t *testing.T) {
	c := envclient.New(connect(t, server(t)), envclient.Config{})
	big := strings.Repeat("x", proto.MaxEnvMessageBytes+1)
	if _, err := c.Start(testCtx(t), proto.EnvStartRequest{Task: big}); !errors.Is(err, proto.ErrPayloadTooLarge) {
		t.Fatalf("err = %v, want ErrPayloadTooLarge", err)
	}
}

func TestCallerCancellationIsNotAnEnvFailure(t *testing.T) {
	url := server(t)
	serve(t, url, proto.SubjectEnvStep("h"), func(r micro.Request) {
		time.Sleep(time.Second)
		respond(t, r, proto.EnvStepReply{Schema: proto.SchemaVersion})
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 5 * time.Second,
		Breaker: breaker.Settings{ConsecutiveFailures: 1, OpenFor: time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Step(ctx, "h", "s", proto.ToolCall{Name: "x"})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, proto.ErrEnvTimeout) {
		t.Fatalf("err = %v, want the caller's context error", err)
	}
	if st := c.Breakers().State("h"); st != gobreaker.StateClosed {
		t.Fatalf("breaker after the caller gave up = %v, want closed", st)
	}
}

func TestCancel(t *testing.T) {
	url := server(t)
	var got atomic.Pointer[proto.EnvCancelRequest]
	serve(t, url, proto.SubjectEnvCancel("h"), func(r micro.Request) {
		var req proto.EnvCancelRequest
		if err := codec.Unmarshal(r.Data(), &req); err != nil {
			refuse(r, proto.ErrMalformed, err.Error())
			return
		}
		got.Store(&req)
		if req.SessionID != "h-1" {
			refuse(r, proto.ErrUnknownSession, req.SessionID)
			return
		}
		respond(t, r, proto.EnvCancelReply{Schema: proto.SchemaVersion})
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: time.Second})
	if err := c.Cancel(testCtx(t), "h", "h-1"); err != nil {
		t.Fatal(err)
	}
	if r := got.Load(); r == nil || r.Schema != proto.SchemaVersion || r.SessionID != "h-1" {
		t.Fatalf("host received %+v", r)
	}
	if err := c.Cancel(testCtx(t), "h", "h-2"); !errors.Is(err, proto.ErrUnknownSession) {
		t.Fatalf("cancel of an unknown session: %v", err)
	}
}
