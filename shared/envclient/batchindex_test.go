package envclient_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// A result whose index names no call of its batch, or a call that an earlier result answered, is counted
// as malformed and reaches no caller; the call it names keeps the first result it had.
func TestBatchResultsWithBadIndexesAreMalformed(t *testing.T) {
	url := server(t)
	nc := connect(t, url)
	result := func(i int, obs string) proto.EnvBatchResult {
		return proto.EnvBatchResult{Index: i, Step: &proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: obs, Status: proto.StatusRunning, Turn: 1}}
	}
	serve(t, url, proto.SubjectEnvStepBatch("hb"), func(r micro.Request) {
		b, err := codec.Marshal(proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: []proto.EnvBatchResult{
			result(1, "out of range"), result(-1, "negative"), result(0, "first"), result(0, "repeated"),
		}}, 0)
		if err != nil {
			t.Error(err)
			return
		}
		_ = nc.Publish(r.Reply(), b)
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	rep, err := c.Step(testCtx(t), "hb", "s", proto.ToolCall{Name: "x"})
	if err != nil || rep.Observation != "first" {
		t.Fatalf("step: %+v, %v; want the first result for index 0", rep, err)
	}
	// The results after the one delivered may still be read as Step returns.
	bustest.Eventually(t, 5*time.Second, "3 malformed results", func() bool { return c.BatchStats().Malformed == 3 })
	if st := c.BatchStats(); st.Batches != 1 || st.Waiting != 0 {
		t.Fatalf("stats %+v, want 1 batch and none waiting", st)
	}
}

// A start whose reply comes after its caller gave up opened a session nobody will play: the client cancels
// it on its host and counts it, instead of leaving it to hold a slot until it idles out.
func TestLateStartReplyIsCancelled(t *testing.T) {
	url := server(t)
	nc := connect(t, url)
	cancels := cancelsOn(t, nc, "late-host")
	serve(t, url, proto.SubjectEnvStartBatch, func(r micro.Request) {
		time.Sleep(700 * time.Millisecond) // past the caller's timeout
		b, err := codec.Marshal(proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: []proto.EnvBatchResult{
			{Index: 0, Start: &proto.EnvStartReply{Schema: proto.SchemaVersion, SessionID: "orphan", HostID: "late-host"}},
		}}, 0)
		if err != nil {
			t.Error(err)
			return
		}
		_ = nc.Publish(r.Reply(), b)
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 200 * time.Millisecond, StartRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Start(testCtx(t), proto.EnvStartRequest{Task: "alfworld", Split: proto.SplitTrain, Seed: 1}); !errors.Is(err, proto.ErrEnvTimeout) {
		t.Fatalf("start: %v, want ErrEnvTimeout", err)
	}
	select {
	case id := <-cancels:
		if id != "orphan" {
			t.Fatalf("cancelled %q, want the orphan session", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session of the late start reply was not cancelled")
	}
	bustest.Eventually(t, 5*time.Second, "the orphan counted", func() bool { return c.BatchStats().OrphanStarts >= 1 })
}

// The same for a start made on its own (a host that does not serve batches, or Unbatched): its late reply
// reaches the inbox the start was made on, which outlives the wait, and its session is cancelled.
func TestLateSingleStartReplyIsCancelled(t *testing.T) {
	url := server(t)
	nc := connect(t, url)
	cancels := cancelsOn(t, nc, "late-host")
	serve(t, url, proto.SubjectEnvStart, func(r micro.Request) {
		time.Sleep(700 * time.Millisecond) // past the caller's timeout
		b, err := codec.Marshal(proto.EnvStartReply{Schema: proto.SchemaVersion, SessionID: "orphan", HostID: "late-host"}, 0)
		if err != nil {
			t.Error(err)
			return
		}
		_ = nc.Publish(r.Reply(), b)
	})
	c := envclient.New(connect(t, url), envclient.Config{CallTimeout: 200 * time.Millisecond, StartRetries: 1, Unbatched: true})
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Start(testCtx(t), proto.EnvStartRequest{Task: "alfworld", Split: proto.SplitTrain, Seed: 1}); !errors.Is(err, proto.ErrEnvTimeout) {
		t.Fatalf("start: %v, want ErrEnvTimeout", err)
	}
	// Both tries timed out; each reply comes late and its session is cancelled.
	for range 2 {
		select {
		case id := <-cancels:
			if id != "orphan" {
				t.Fatalf("cancelled %q, want the orphan session", id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the session of a late start reply was not cancelled")
		}
	}
	bustest.Eventually(t, 5*time.Second, "the orphans counted", func() bool { return c.BatchStats().OrphanStarts == 2 })
}

// cancelsOn returns the session ids of the cancels host receives.
func cancelsOn(t *testing.T, nc *nats.Conn, host string) <-chan string {
	t.Helper()
	cancels := make(chan string, 4)
	sub, err := nc.Subscribe(proto.SubjectEnvCancel(host), func(m *nats.Msg) {
		var req proto.EnvCancelRequest
		if err := codec.Unmarshal(m.Data, &req); err == nil {
			cancels <- req.SessionID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return cancels
}
