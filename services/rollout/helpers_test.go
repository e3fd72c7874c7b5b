package rollout_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

var eventually = bustest.Eventually

var testCtx = bustest.Ctx

// mesh is an embedded server with the mesh's topology, seen from the test's own connection.
type mesh struct {
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newMesh(t *testing.T) *mesh {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	m := &mesh{url: srv.URL()}
	m.nc = m.conn(t)
	if m.js, err = bus.JetStream(m.nc); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureTopology(testCtx(t), m.js, 1); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *mesh) conn(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(testCtx(t), m.url, "rollout-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// counter opens the admission counter on a connection of its own.
func (m *mesh) counter(t *testing.T) *admission.Counter {
	t.Helper()
	js, err := bus.JetStream(m.conn(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := admission.Bind(testCtx(t), js)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (m *mesh) admitted(t *testing.T) proto.Admission {
	t.Helper()
	a, _, err := m.counter(t).Read(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// host runs a real env host with the built-in families; stop ends it and waits for Run.
type host struct {
	*env.Host
	stop func()
}

func (m *mesh) startHost(t *testing.T) *host {
	t.Helper()
	return m.startHostWith(t, env.Config{})
}

func (m *mesh) startHostWith(t *testing.T, cfg env.Config) *host {
	t.Helper()
	h, err := env.New(cfg, env.Deps{Conn: m.conn(t), Families: builtin.Registry(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	stop := bustest.Run(t, "env host", 10*time.Second, h.Run)
	eventually(t, 10*time.Second, "the env host to serve", h.Running)
	return &host{Host: h, stop: stop}
}

func newModel(t *testing.T, seed int64) *policy.Model {
	t.Helper()
	cfg := policy.Config{Bits: 10, Seed: seed}
	cfg.SetDefaults()
	pm, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// publishModel stores a model as policy version v, as the trainer does: weights first, then the record.
// A non-empty badSHA replaces the record's checksum.
func (m *mesh) publishModel(t *testing.T, pm *policy.Model, v int64, badSHA string) proto.PolicyVersion {
	t.Helper()
	ctx := testCtx(t)
	w, err := pm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := m.js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, proto.WeightsObject(v), w); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(w)
	rec := proto.PolicyVersion{Schema: proto.SchemaVersion, Version: v, Object: proto.WeightsObject(v), Size: int64(len(w)),
		SHA256: hex.EncodeToString(sum[:]), PublishedAt: time.Now().UnixNano()}
	if badSHA != "" {
		rec.SHA256 = badSHA
	}
	data, err := codec.Marshal(rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := m.js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, proto.KeyPolicyCurrent, data); err != nil {
		t.Fatal(err)
	}
	return rec
}

func (m *mesh) msgs(t *testing.T, stream string) uint64 {
	t.Helper()
	st, err := m.js.Stream(testCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// episodes reads every episode stored in the episodes stream.
func (m *mesh) episodes(t *testing.T) []proto.Episode {
	t.Helper()
	st, err := m.js.Stream(testCtx(t), proto.StreamEpisodes)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []proto.Episode
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		raw, err := st.GetMsg(testCtx(t), seq)
		if err != nil {
			t.Fatal(err)
		}
		var ep proto.Episode
		if err := codec.Unmarshal(raw.Data, &ep); err != nil {
			t.Fatal(err)
		}
		if raw.Header.Get(nats.MsgIdHdr) != ep.ID || raw.Subject != proto.SubjectEpisodes(ep.Task) {
			t.Fatalf("episode %s stored on %s with msg id %q", ep.ID, raw.Subject, raw.Header.Get(nats.MsgIdHdr))
		}
		out = append(out, ep)
	}
	return out
}

// run starts r.Run and returns stop, which cancels it and fails the test unless Run returns nil within
// 20 s; stop is idempotent and also runs at cleanup.
func run(t *testing.T, r *rollout.Rollout) (stop func()) {
	t.Helper()
	return bustest.Run(t, "rollout", 20*time.Second, r.Run)
}
