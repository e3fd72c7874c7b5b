package bus_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

var eventually = bustest.Eventually

// embedded starts an embedded server in the test's folder, shut down when the test ends.
func embedded(t *testing.T) *bus.Embedded {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// server starts an embedded server in the test's folder and returns its URL.
func server(t *testing.T) string { return embedded(t).URL() }

func connect(t *testing.T, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := bus.Connect(ctx, url, "bus-test", zerolog.Nop(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

var testCtx = bustest.Ctx

func TestStartEmbeddedNeedsStoreDir(t *testing.T) {
	if _, err := bus.StartEmbedded(bus.EmbeddedConfig{}); err == nil || !strings.Contains(err.Error(), "StoreDir") {
		t.Fatalf("err = %v, want one that names StoreDir", err)
	}
}

func TestEmbeddedTrafficCountsMessages(t *testing.T) {
	srv := embedded(t)
	nc, _ := connect(t, srv.URL())
	got := make(chan struct{}, 10)
	sub, err := nc.Subscribe("traffic.test", func(*nats.Msg) { got <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	before, err := srv.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := nc.Publish("traffic.test", make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		<-got
	}
	// The server adds a read's inbound messages to its totals after it has delivered them, so the
	// subscriber can have all 10 before the totals do: read them until both sides are in (or 5 s pass).
	var d bus.Traffic
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		after, err := srv.Traffic()
		if err != nil {
			t.Fatal(err)
		}
		if d = after.Sub(before); (d.InMsgs >= 10 && d.OutMsgs >= 10) || time.Now().After(deadline) {
			break
		}
	}
	// 10 publishes in and 10 deliveries out, of 100 bytes each (a PING/PONG of the flush is no message).
	if d.InMsgs != 10 || d.OutMsgs != 10 || d.InBytes != 1000 || d.OutBytes != 1000 || d.Msgs() != 20 {
		t.Fatalf("traffic of 10 messages of 100 B to one subscriber: %+v, want 10 in, 10 out, 1000 B each way", d)
	}
}

func TestEmbeddedServerAcceptsLargeMessages(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	// A batch may be several MB: the server's max_payload and the stream's limit must allow it.
	data := make([]byte, 4<<20)
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectBatches, "big", data); err != nil {
		t.Fatalf("publish 4 MiB batch: %v", err)
	}
}

func TestEnsureTopologyIsIdempotent(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	for i := range 2 {
		if err := bus.EnsureTopology(ctx, js, 1); err != nil {
			t.Fatalf("EnsureTopology call %d: %v", i+1, err)
		}
	}
	for _, s := range proto.Streams {
		st, err := js.Stream(ctx, s.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", s.Name, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := info.Config
		if strings.Join(c.Subjects, ",") != strings.Join(s.Subjects, ",") || c.Duplicates != proto.DedupWindow ||
			c.MaxMsgSize != s.MaxMsg || c.MaxBytes != s.MaxBytes || c.MaxAge != s.MaxAge || c.Storage != jetstream.FileStorage {
			t.Errorf("stream %s config = subjects %v dup %v maxmsg %d maxbytes %d maxage %v storage %v; want %+v",
				s.Name, c.Subjects, c.Duplicates, c.MaxMsgSize, c.MaxBytes, c.MaxAge, c.Storage, s)
		}
	}
	for _, b := range proto.KVBuckets {
		kv, err := js.KeyValue(ctx, b.Bucket)
		if err != nil {
			t.Fatalf("kv %s: %v", b.Bucket, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.History() != int64(b.History) || st.TTL() != b.TTL {
			t.Errorf("kv %s history = %d, ttl %v; want %d, %v", b.Bucket, st.History(), st.TTL(), b.History, b.TTL)
		}
	}
	for _, b := range proto.ObjectBuckets {
		if _, err := js.ObjectStore(ctx, b); err != nil {
			t.Errorf("object store %s: %v", b, err)
		}
	}
	// A third call on a topology that holds data keeps the data.
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectEpisodes("alfworld"), "e1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, js, proto.StreamEpisodes); n != 1 {
		t.Fatalf("episodes stream holds %d messages after EnsureTopology, want 1", n)
	}
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	ctx := testCtx(t)
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestResetThenEnsureTopology(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	// Reset on a server that never held the mesh is not an error.
	if err := bus.ResetTopology(ctx, js); err != nil {
		t.Fatalf("ResetTopology on an empty server: %v", err)
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectTrain, "t1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, proto.KeyPolicyCurrent, []byte("v")); err != nil {
		t.Fatal(err)
	}
	obj, err := js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, proto.WeightsObject(0), []byte("w")); err != nil {
		t.Fatal(err)
	}

	if err := bus.ResetTopology(ctx, js); err != nil {
		t.Fatalf("ResetTopology: %v", err)
	}
	if _, err := js.Stream(ctx, proto.StreamTrain); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream after reset: %v, want ErrStreamNotFound", err)
	}
	if err := bus.ResetTopology(ctx, js); err != nil {
		t.Fatalf("second ResetTopology: %v", err)
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatalf("EnsureTopology after reset: %v", err)
	}
	if n := streamMsgs(t, js, proto.StreamTrain); n != 0 {
		t.Fatalf("train stream holds %d messages after reset, want 0", n)
	}
	kv, err = js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, proto.KeyPolicyCurrent); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("policy key after reset: %v, want ErrKeyNotFound", err)
	}
	obj, err = js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.GetBytes(ctx, proto.WeightsObject(0)); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("weights after reset: %v, want ErrObjectNotFound", err)
	}
	// The same msg id is accepted again: the dedup window went with the stream.
	ack, err := bus.PublishOnce(ctx, js, proto.SubjectTrain, "t1", []byte("x"))
	if err != nil || ack.Duplicate {
		t.Fatalf("publish after reset: ack %+v, err %v", ack, err)
	}
}

func TestPublishOnceDeduplicates(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		givenID           string
		expectedDuplicate bool
		expectedSeq       uint64
	}{
		{"a", false, 1},
		{"a", true, 1},
		{"b", false, 2},
		{"a", true, 1},
	}
	for i, tc := range tests {
		ack, err := bus.PublishOnce(ctx, js, proto.SubjectBatches, tc.givenID, []byte(tc.givenID))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate != tc.expectedDuplicate || ack.Sequence != tc.expectedSeq {
			t.Fatalf("publish %d (%s): duplicate %v seq %d, want %v %d", i, tc.givenID, ack.Duplicate, ack.Sequence, tc.expectedDuplicate, tc.expectedSeq)
		}
	}
	if n := streamMsgs(t, js, proto.StreamBatches); n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
}

// A group start marker goes to its instance's subject; when a service of an older release has set the
// groups stream back to the one subject it knows, the marker's subject is added back and the marker
// stored there all the same.
func TestPublishGroupStartRestoresTheInstanceSubjects(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, proto.StreamGroups)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Subjects = []string{proto.SubjectGroupStart}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectGroupStartOf("i1"), "x", []byte("x")); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("publish on an instance subject the stream lacks: %v, want ErrNoStreamResponse", err)
	}
	for i, want := range []bool{false, true} {
		ack, err := bus.PublishGroupStart(ctx, js, "i1", "g1", []byte("marker"))
		if err != nil || ack.Duplicate != want {
			t.Fatalf("publish %d: %+v, %v; want stored, duplicate %v", i, ack, err, want)
		}
	}
	m, err := st.GetLastMsgForSubject(ctx, proto.SubjectGroupStartOf("i1"))
	if err != nil || string(m.Data) != "marker" || m.Header.Get(jetstream.MsgIDHeader) != "start-g1" {
		t.Fatalf("last marker of i1: %+v, %v; want the one published, with the group's id", m, err)
	}
	info, err := st.Info(ctx)
	if err != nil || len(info.Config.Subjects) != 2 {
		t.Fatalf("stream subjects %v (%v), want both of this release's", info.Config.Subjects, err)
	}
}

func TestConsumerConfig(t *testing.T) {
	c := bus.ConsumerConfig("d", "jetrl.x", 7, 3*time.Second)
	if c.Durable != "d" || c.FilterSubject != "jetrl.x" || c.MaxAckPending != 7 || c.AckWait != 3*time.Second ||
		c.AckPolicy != jetstream.AckExplicitPolicy || c.MaxDeliver != -1 || c.DeliverPolicy != jetstream.DeliverAllPolicy {
		t.Fatalf("ConsumerConfig = %+v", c)
	}
}

func TestDeadLetter(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectBatches, "poison", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectBatches, "fine", []byte("fine")); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, proto.StreamBatches, bus.ConsumerConfig("dl-test", proto.SubjectBatches, 8, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var poison jetstream.Msg
	for m := range batch.Messages() {
		poison = m
	}
	if poison == nil || string(poison.Data()) != "garbage" {
		t.Fatalf("fetched %v, want the poison message", poison)
	}
	reason := errors.New("malformed message: not msgpack")
	if first, err := bus.DeadLetterFirst(ctx, js, "stage", poison, reason); err != nil || !first {
		t.Fatalf("DeadLetterFirst: %v, %v; want the first copy stored", first, err)
	}
	// A retried dead-letter of the same message is stored once, and says it was not the first.
	// (The publish is deduplicated by its msg id; the message was already terminated.)
	if first, err := bus.DeadLetterFirst(ctx, js, "stage", poison, reason); (err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd)) || first {
		t.Fatalf("second DeadLetterFirst: %v, %v; want a duplicate", first, err)
	}
	if n := streamMsgs(t, js, proto.StreamDeadLetter); n != 1 {
		t.Fatalf("dead-letter stream holds %d messages, want 1", n)
	}
	st, err := js.Stream(ctx, proto.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Subject != proto.SubjectDeadLetterPrefix+"stage" || string(raw.Data) != "garbage" ||
		raw.Header.Get(proto.HeaderDeadLetterReason) != reason.Error() ||
		raw.Header.Get(proto.HeaderDeadLetterSubject) != proto.SubjectBatches {
		t.Fatalf("dead letter = subject %q data %q headers %v", raw.Subject, raw.Data, raw.Header)
	}
	// The poison message was terminated: the consumer moves on to the next one and never gets it back.
	next, err := cons.Fetch(2, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range next.Messages() {
		got = append(got, string(m.Data()))
		_ = m.Ack()
	}
	if strings.Join(got, ",") != "fine" {
		t.Fatalf("after dead-letter the consumer got %v, want [fine]", got)
	}
}

func TestWatchPolicyVersion(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	put := func(v int64) {
		t.Helper()
		b, err := codec.Marshal(proto.PolicyVersion{Schema: proto.SchemaVersion, Version: v, Object: proto.WeightsObject(v)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, proto.KeyPolicyCurrent, b); err != nil {
			t.Fatal(err)
		}
	}
	put(3) // published before the watch starts: delivered first
	var mu sync.Mutex
	var seen []int64
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- bus.WatchPolicyVersion(wctx, js, zerolog.Nop(), func(rec proto.PolicyVersion) {
			mu.Lock()
			seen = append(seen, rec.Version)
			mu.Unlock()
		})
	}()
	last := func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]int64(nil), seen...)
	}
	eventually(t, 5*time.Second, "the current version", func() bool { return len(last()) == 1 })
	// A record that does not decode is skipped, not fatal; a delete is not a version.
	if _, err := kv.Put(ctx, proto.KeyPolicyCurrent, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, proto.KeyPolicyCurrent); err != nil {
		t.Fatal(err)
	}
	put(4)
	eventually(t, 5*time.Second, "version 4", func() bool { return len(last()) == 2 })
	if got := last(); got[0] != 3 || got[1] != 4 {
		t.Fatalf("watch saw %v, want [3 4]", got)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WatchPolicyVersion returned %v at cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchPolicyVersion did not return after cancel")
	}
}

func TestWatchPolicyVersionWithoutBucket(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	err := bus.WatchPolicyVersion(ctx, js, zerolog.Nop(), func(proto.PolicyVersion) {})
	if err == nil || !strings.Contains(err.Error(), proto.BucketPolicy) {
		t.Fatalf("err = %v, want one naming %s", err, proto.BucketPolicy)
	}
}

func TestConnectGivesUpWhenContextEnds(t *testing.T) {
	// Nothing listens there; Connect keeps retrying until the context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	nc, err := bus.Connect(ctx, "nats://127.0.0.1:1", "bus-test", zerolog.Nop())
	if err == nil {
		nc.Close()
		t.Fatal("Connect to a closed port succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("Connect took %v to notice the context ended", time.Since(start))
	}
}

func TestConnectIsLive(t *testing.T) {
	nc, _ := connect(t, server(t))
	if !nc.IsConnected() {
		t.Fatal("Connect returned before the connection was up")
	}
}

// The file store ceiling is fixed, not 75% of the free disk: the topology and a second episodes-sized
// stream both reserve their limits, and a stream whose limit exceeds the ceiling is refused by the server.
func TestEmbeddedMaxStoreIsFixed(t *testing.T) {
	ctx := testCtx(t)
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir(), MaxStore: 12 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	_, js := connect(t, srv.URL())
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EXTRA", Subjects: []string{"extra.>"}, MaxBytes: proto.StreamMaxBytes}); err != nil {
		t.Fatalf("a 2 GiB stream beside the topology, under a 12 GiB ceiling: %v", err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "TOO_BIG", Subjects: []string{"too.>"}, MaxBytes: 12 << 30})
	if err == nil || !strings.Contains(err.Error(), "insufficient storage") {
		t.Fatalf("err = %v, want the server to refuse a stream past the ceiling", err)
	}
	if _, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir(), MaxStore: -1}); err == nil {
		t.Fatal("a negative MaxStore was accepted")
	}
}

// A client in the server's process reaches it through InProcess without a socket, and what it stores is
// what a client over TCP reads back, a message near the payload limit included.
func TestInProcessConnection(t *testing.T) {
	ctx := testCtx(t)
	srv := embedded(t)
	in, ijs := connect(t, srv.URL(), srv.InProcess())
	tcp, tjs := connect(t, srv.URL())
	if got := in.ConnectedAddr(); got != "pipe" {
		t.Fatalf("in-process connection's remote address = %q, want an in-memory pipe", got)
	}
	if got := tcp.ConnectedAddr(); !strings.HasPrefix(got, "127.0.0.1:") {
		t.Fatalf("TCP connection's remote address = %q, want loopback", got)
	}
	if err := bus.EnsureTopology(ctx, ijs, 1); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if _, err := bus.PublishOnce(ctx, ijs, proto.SubjectBatches, "in-process", data); err != nil {
		t.Fatalf("publish 4 MiB in-process: %v", err)
	}
	st, err := tjs.Stream(ctx, proto.StreamBatches)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, proto.SubjectBatches)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != string(data) {
		t.Fatalf("read back over TCP %d B that differ from the %d B published in-process", len(msg.Data), len(data))
	}
}

// ConsumeInOrder returns nil when its context ends, and ErrConsumerGone when the messages stop while it
// lasts (the consumer deleted under it): a service must not look stopped on purpose.
func TestConsumeInOrderReportsADeletedConsumer(t *testing.T) {
	ctx := testCtx(t)
	_, js := connect(t, server(t))
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, proto.StreamBatches, bus.ConsumerConfig("gone-test", proto.SubjectBatches, 8, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectBatches, "one", []byte("one")); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- bus.ConsumeInOrder(context.Background(), cons, 8, zerolog.Nop(), func(m jetstream.Msg) error {
			got <- string(m.Data())
			return m.Ack()
		})
	}()
	if m := <-got; m != "one" {
		t.Fatalf("handled %q, want one", m)
	}
	if err := js.DeleteConsumer(ctx, proto.StreamBatches, "gone-test"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, bus.ErrConsumerGone) {
			t.Fatalf("ConsumeInOrder returned %v, want ErrConsumerGone", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ConsumeInOrder goes on after its consumer was deleted")
	}

	// Ending the context is a clean stop.
	cons, err = js.CreateOrUpdateConsumer(ctx, proto.StreamBatches, bus.ConsumerConfig("stop-test", proto.SubjectBatches, 8, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- bus.ConsumeInOrder(cctx, cons, 8, zerolog.Nop(), func(m jetstream.Msg) error { return m.Ack() })
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ConsumeInOrder returned %v after its context ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ConsumeInOrder goes on after its context ended")
	}
}

// cuttable is a TCP proxy to a server whose connections can be cut, and new ones refused, until restored:
// a network failure between a client and a server that stays up.
type cuttable struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newCuttable(t *testing.T, target string) *cuttable {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttable{ln: ln, target: target}
	served := make(chan struct{})
	go func() {
		defer close(served)
		p.serve()
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-served
		p.cut()
	})
	return p
}

// serve accepts until the listener closes; each pair of copies ends when cut closes its connections.
func (p *cuttable) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || p.down {
			p.mu.Unlock()
			_ = c.Close()
			if s != nil {
				_ = s.Close()
			}
			continue
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}

func (p *cuttable) url() string { return "nats://" + p.ln.Addr().String() }

func (p *cuttable) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cuttable) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// What a connection publishes while cut off from its server is sent once the link is back, however late
// (nats.go keeps it); with Unbuffered the publish fails at once and nothing is sent later.
func TestUnbufferedConnectionSendsNothingLate(t *testing.T) {
	srv := embedded(t)
	link := newCuttable(t, strings.TrimPrefix(srv.URL(), "nats://"))
	buffered, js := connect(t, link.url())
	unbuffered, _ := connect(t, link.url(), bus.Unbuffered())
	if !bus.Buffered(buffered) || bus.Buffered(unbuffered) {
		t.Fatalf("Buffered = %v and %v, want true for the default connection and false for Unbuffered's", bus.Buffered(buffered), bus.Buffered(unbuffered))
	}
	ctx := testCtx(t)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
	if err != nil {
		t.Fatal(err)
	}

	link.cut()
	eventually(t, 10*time.Second, "both connections to notice the link is cut", func() bool {
		return !buffered.IsConnected() && !unbuffered.IsConnected()
	})
	if err := buffered.Publish("late.buffered", []byte("kept")); err != nil {
		t.Fatalf("publish on the default connection while cut off: %v, want it kept", err)
	}
	if err := unbuffered.Publish("late.unbuffered", []byte("late")); !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Fatalf("publish on the Unbuffered connection while cut off: %v, want nats.ErrReconnectBufExceeded", err)
	}

	link.restore()
	eventually(t, 10*time.Second, "both connections back", func() bool { return buffered.IsConnected() && unbuffered.IsConnected() })
	if err := unbuffered.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the kept publish stored", func() bool {
		_, err := s.GetLastMsgForSubject(ctx, "late.buffered")
		return err == nil
	})
	if m, err := s.GetLastMsgForSubject(ctx, "late.unbuffered"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the Unbuffered connection's publish: stored %v (err %v), want nothing", m, err)
	}
}
