//go:build containers

// Package containers runs the jetrl mesh from the images `make images` builds (jetrl/<service>:dev,
// jetrl/nats-server:dev) with testcontainers-go: a 3-node NATS JetStream cluster and the five services on
// a private Docker network, as docker-compose.yml does, then injects faults into it and checks by episode
// and batch ids that nothing was lost or trained twice. It is behind the build tag `containers` and in a
// module of its own (outside go.work); `make test-containers` (part of `make test`) runs it.
// Ryuk is not used: every container (with its anonymous volumes) and the network are removed in t.Cleanup,
// whether the test passes or fails.
package containers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/moby/moby/api/types/container"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/vmihailenco/msgpack/v5"
)

// tag is the image tag under test (make images IMAGE_TAG=...).
func tag() string {
	if t := os.Getenv("JETRL_IMAGE_TAG"); t != "" {
		return t
	}
	return "dev"
}

var natsNodes = []string{"nats-1", "nats-2", "nats-3"}

// labels mark every container and network of a run: jetrl.test names the test, jetrl.run the run
// (JETRL_TEST_RUN; make test-containers removes whatever carries its run's label after the test, as a
// safety net should the test binary itself be killed before its cleanups ran).
func labels(t *testing.T) map[string]string {
	l := map[string]string{"jetrl.test": t.Name()}
	if run := os.Getenv("JETRL_TEST_RUN"); run != "" {
		l["jetrl.run"] = run
	}
	return l
}

// Settings of the mesh under test, shared by the services that read them.
const (
	batchSize = 64
	eta       = 2
	minGroup  = 2 // the replay-buffer's default: GRPO needs two usable members to compare
	groupSize = 8 // the rollouts' default G
	// rolloutConcurrency is the rollouts' default: the most episodes one replica has in flight.
	rolloutConcurrency = 64
	// rolloutKills is how often the test kills a rollout replica (restarting it in between).
	rolloutKills = 3
	// groupTimeout releases a group missing members (its rollout was killed); shorter than the default 2m
	// so that the test's final accounting does not wait long for them.
	groupTimeout = 45 * time.Second
)

// mesh is a running containerized mesh.
type mesh struct {
	t   *testing.T
	net *testcontainers.DockerNetwork
	// containers by network alias (nats-1, trainer, env-2, rollout-1, ...)
	c map[string]*testcontainers.DockerContainer
	// nc is the test's operator connection through the nodes' mapped client ports; url lists them.
	nc  *nats.Conn
	js  jetstream.JetStream
	url string
}

// start runs one container on the mesh's network under alias and schedules its removal (and, when the
// test failed, a dump of its last log lines) in t.Cleanup.
func (m *mesh) start(ctx context.Context, image, alias string, opts ...testcontainers.ContainerCustomizer) *testcontainers.DockerContainer {
	m.t.Helper()
	opts = append([]testcontainers.ContainerCustomizer{
		network.WithNetwork([]string{alias}, m.net),
		testcontainers.WithLabels(labels(m.t)),
	}, opts...)
	c, err := testcontainers.Run(ctx, image, opts...)
	testcontainers.CleanupContainer(m.t, c)
	m.t.Cleanup(func() {
		if m.t.Failed() && c != nil {
			m.t.Logf("--- last log lines of %s (%s)\n%s", alias, image, logTail(c, logLines()))
		}
	})
	if err != nil {
		m.t.Fatalf("start %s (%s): %v", alias, image, err)
	}
	m.c[alias] = c
	return c
}

// logLines is how many log lines of each container a failed test prints: JETRL_LOG_LINES, 25 unless set.
func logLines() int {
	if n, err := strconv.Atoi(os.Getenv("JETRL_LOG_LINES")); err == nil && n > 0 {
		return n
	}
	return 25
}

// logTail returns the last n lines of a container's log.
func logTail(c *testcontainers.DockerContainer, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	var lines []string
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// hostAddr is where the containers' mapped ports are reached from this process.
func hostAddr(ctx context.Context, c *testcontainers.DockerContainer) (string, error) {
	// With a local daemon (unix socket) the mapped port is on this machine; testcontainers may otherwise
	// resolve the host as the default gateway when it believes it runs inside a container.
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" && (os.Getenv("DOCKER_HOST") == "" || strings.HasPrefix(os.Getenv("DOCKER_HOST"), "unix://")) {
		return "127.0.0.1", nil
	}
	return c.Host(ctx)
}

// mapped returns host:port of a container port as seen from this process (it changes when a container
// is restarted).
func (m *mesh) mapped(ctx context.Context, alias, port string) (string, error) {
	c := m.c[alias]
	host, err := hostAddr(ctx, c)
	if err != nil {
		return "", err
	}
	p, err := c.MappedPort(ctx, port)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s:%s", host, p.Port()), nil
}

// startMesh starts the 3-node cluster, then one trainer, advantage-normalizer and replay-buffer, envHosts
// env hosts (env-1, ...) and rollouts rollout replicas (rollout-1, ...).
func startMesh(t *testing.T, ctx context.Context, envHosts, rollouts int) *mesh {
	t.Helper()
	nw, err := network.New(ctx, network.WithLabels(labels(t)))
	testcontainers.CleanupNetwork(t, nw)
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	m := &mesh{t: t, net: nw, c: map[string]*testcontainers.DockerContainer{}}

	// The three nodes are started before any is waited for: none is healthy (JetStream current with a
	// meta leader) until a quorum of them has routes to the others.
	for _, node := range natsNodes {
		m.start(ctx, "jetrl/nats-server:"+tag(), node,
			testcontainers.WithEnv(map[string]string{"NATS_SERVER_NAME": node}),
			testcontainers.WithCmd("-c", "/etc/nats/cluster.conf"),
			testcontainers.WithExposedPorts("4222/tcp", "8222/tcp"))
	}
	for _, node := range natsNodes {
		if err := m.waitHealthy(ctx, node, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var urls []string
	for _, node := range natsNodes {
		a, err := m.mapped(ctx, node, "4222/tcp")
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, "nats://"+a)
	}
	m.url = strings.Join(urls, ",")
	// The servers advertise their in-network names (nats-2:4222), which this process cannot resolve.
	m.nc, err = nats.Connect(m.url, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond), nats.IgnoreDiscoveredServers())
	if err != nil {
		t.Fatalf("connect %s: %v", m.url, err)
	}
	t.Cleanup(m.nc.Close)
	if m.js, err = jetstream.New(m.nc); err != nil {
		t.Fatal(err)
	}
	t.Logf("NATS cluster up; operator URL %s", m.url)

	common := map[string]string{
		"JETRL_NATS_URL":        "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222",
		"JETRL_STREAM_REPLICAS": "3",
		"JETRL_METRICS_ADDR":    ":9090",
		"JETRL_TASKS":           "alfworld",
		"JETRL_BATCH_SIZE":      fmt.Sprint(batchSize),
		"JETRL_ETA":             fmt.Sprint(eta),
	}
	// As in docker-compose.yml: a service that exits on an error is restarted by Docker. (A container the
	// test kills or stops is not: Docker counts that as stopped by hand, and the test starts it again.)
	restart := testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		hc.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}
	})
	run := func(service, alias string, extra map[string]string, opts ...testcontainers.ContainerCustomizer) {
		env := map[string]string{}
		for k, v := range common {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		m.start(ctx, "jetrl/"+service+":"+tag(), alias, append([]testcontainers.ContainerCustomizer{testcontainers.WithEnv(env), restart}, opts...)...)
	}
	run("trainer", "trainer", nil)
	run("advantage-normalizer", "advantage-normalizer", nil)
	run("replay-buffer", "replay-buffer", map[string]string{"JETRL_GROUP_TIMEOUT": groupTimeout.String()})
	for i := 1; i <= envHosts; i++ {
		id := fmt.Sprintf("env-%d", i)
		// Steps take time, as a real environment's do (a lognormal latency, median 40 ms), so that an
		// episode is in flight for a while and a fault lands on some.
		run("env", id, map[string]string{"JETRL_ENV_HOST_ID": id,
			"JETRL_ENV_STEP_LATENCY_MEDIAN": "40ms", "JETRL_ENV_STEP_LATENCY_P99": "200ms"})
	}
	for i := 1; i <= rollouts; i++ {
		id := fmt.Sprintf("rollout-%d", i)
		// The first replica is given its id; the others take it, as docker-compose's replicas do, from
		// their container's hostname (here set to the alias, so the test can name them), which a replica
		// killed and started again keeps.
		extra := map[string]string{}
		if i == 1 {
			extra["JETRL_ROLLOUT_ID"] = id
		}
		run("rollout", id, extra, testcontainers.WithConfigModifier(func(c *container.Config) { c.Hostname = id }))
	}
	return m
}

// waitHealthy waits for the image's HEALTHCHECK of one container to pass (for nats: /healthz answers ok
// once the node's JetStream is current with the cluster's meta leader).
func (m *mesh) waitHealthy(ctx context.Context, alias string, within time.Duration) error {
	if err := wait.ForHealthCheck().WithStartupTimeout(within).WaitUntilReady(ctx, m.c[alias]); err != nil {
		return fmt.Errorf("%s not healthy within %v: %w", alias, within, err)
	}
	return nil
}

// docker runs the docker CLI (faults are what an operator or a crash does to a container).
func (m *mesh) docker(ctx context.Context, args ...string) string {
	m.t.Helper()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		m.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return strings.TrimSpace(out.String())
}

func (m *mesh) id(alias string) string { return m.c[alias].GetContainerID() }

// kill sends SIGKILL to a container's process and waits for it to be gone.
func (m *mesh) kill(ctx context.Context, alias string) {
	m.t.Helper()
	m.docker(ctx, "kill", "--signal", "KILL", m.id(alias))
	m.docker(ctx, "wait", m.id(alias))
}

// stop stops a container (SIGTERM, then SIGKILL after grace) and waits for it to be gone.
func (m *mesh) stop(ctx context.Context, alias string, grace time.Duration) {
	m.t.Helper()
	m.docker(ctx, "stop", "--time", fmt.Sprint(int(grace.Seconds())), m.id(alias))
}

// restart starts a stopped container again, with its filesystem and volumes as they were.
func (m *mesh) restart(ctx context.Context, alias string) {
	m.t.Helper()
	m.docker(ctx, "start", m.id(alias))
}

// disconnect takes a container off the mesh's network; connect puts it back under its alias.
func (m *mesh) disconnect(ctx context.Context, alias string) {
	m.t.Helper()
	m.docker(ctx, "network", "disconnect", "--force", m.net.Name, m.id(alias))
}

func (m *mesh) connect(ctx context.Context, alias string) {
	m.t.Helper()
	m.docker(ctx, "network", "connect", "--alias", alias, m.net.Name, m.id(alias))
}

// statuses gathers every replica's answer on a status subject (each replica answers; no queue group),
// waiting up to a second for want answers.
func (m *mesh) statuses(service string, want int) []map[string]any {
	inbox := nats.NewInbox()
	sub, err := m.nc.SubscribeSync(inbox)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := m.nc.PublishRequest(proto.SubjectStatus(service), inbox, nil); err != nil {
		return nil
	}
	var out []map[string]any
	deadline := time.Now().Add(time.Second)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return out
		}
		var r struct {
			Status map[string]any `json:"status"`
		}
		if json.Unmarshal(msg.Data, &r) == nil && r.Status != nil {
			out = append(out, r.Status)
		}
		if len(out) >= want {
			return out
		}
	}
}

// status is the one answer of a single-replica service (nil when it does not answer).
func (m *mesh) status(service string) map[string]any {
	msg, err := m.nc.Request(proto.SubjectStatus(service), nil, 3*time.Second)
	if err != nil {
		return nil
	}
	var r struct {
		Status map[string]any `json:"status"`
	}
	if json.Unmarshal(msg.Data, &r) != nil {
		return nil
	}
	return r.Status
}

func number(st map[string]any, key string) float64 {
	f, _ := st[key].(float64)
	return f
}

// sum adds a counter over every replica's status.
func sum(sts []map[string]any, key string) float64 {
	s := 0.0
	for _, st := range sts {
		s += number(st, key)
	}
	return s
}

// current reads the policy version record the trainer last published (nil before the first).
func (m *mesh) current(ctx context.Context) *proto.PolicyVersion {
	kv, err := m.js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		return nil
	}
	e, err := kv.Get(ctx, proto.KeyPolicyCurrent)
	if err != nil {
		return nil
	}
	var rec proto.PolicyVersion
	if msgpack.Unmarshal(e.Value(), &rec) != nil {
		return nil
	}
	return &rec
}

// version is the published policy version, or -1.
func (m *mesh) version(ctx context.Context) int64 {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if rec := m.current(rctx); rec != nil {
		return rec.Version
	}
	return -1
}

// waitVersion waits for the published version to reach v.
func (m *mesh) waitVersion(ctx context.Context, v int64, within time.Duration, why string) int64 {
	m.t.Helper()
	deadline := time.Now().Add(within)
	got := int64(-1)
	for time.Now().Before(deadline) {
		if got = m.version(ctx); got >= v {
			m.t.Logf("%s: version %d after %v", why, got, (within - time.Until(deadline)).Round(time.Second))
			return got
		}
		time.Sleep(time.Second)
	}
	m.dumpState()
	m.t.Fatalf("%s: policy version %d after %v, want >= %d", why, got, within, v)
	return got
}

// dumpState logs what every stage reports and the staleness gate's counter, to tell a stalled mesh's
// stage from the others.
func (m *mesh) dumpState() {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.t.Logf("staleness gate: %s", m.gateSlack(ctx))
	for _, s := range []struct {
		service string
		n       int
	}{{"rollout", 2}, {"env", 2}, {"replay-buffer", 1}, {"advantage-normalizer", 1}, {"trainer", 1}} {
		for _, st := range m.statuses(s.service, s.n) {
			b, _ := json.Marshal(st)
			m.t.Logf("status of %s: %s", s.service, b)
		}
	}
}

// weights fetches the weights a version record names from the Object Store.
func (m *mesh) weights(ctx context.Context, rec *proto.PolicyVersion) ([]byte, error) {
	obj, err := m.js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		return nil, err
	}
	var b []byte
	for attempt := 0; attempt < 20; attempt++ {
		if b, err = obj.GetBytes(ctx, rec.Object); err == nil {
			return b, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return nil, fmt.Errorf("weights %s: %w", rec.Object, err)
}

// metaLeader asks a node's monitoring endpoint which node leads the JetStream meta group.
func (m *mesh) metaLeader(ctx context.Context, node string) (string, error) {
	addr, err := m.mapped(ctx, node, "8222/tcp")
	if err != nil {
		return "", err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/jsz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var jsz struct {
		Meta struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return "", err
	}
	if jsz.Meta.Leader == "" {
		return "", errors.New("no meta leader")
	}
	return jsz.Meta.Leader, nil
}

// replicasCurrent reports whether every stream of the mesh (streams, KV and Object Store buckets) has a
// leader and all its peers current, and names the first that has not.
func (m *mesh) replicasCurrent(ctx context.Context) (bool, string) {
	lister := m.js.ListStreams(ctx)
	n := 0
	for info := range lister.Info() {
		n++
		ci := info.Cluster
		if ci == nil || ci.Leader == "" {
			return false, info.Config.Name + ": no leader"
		}
		if len(ci.Replicas) != 2 {
			return false, fmt.Sprintf("%s: %d peers besides the leader, want 2", info.Config.Name, len(ci.Replicas))
		}
		for _, p := range ci.Replicas {
			if !p.Current || p.Offline {
				return false, fmt.Sprintf("%s: peer %s current=%v offline=%v lag=%d", info.Config.Name, p.Name, p.Current, p.Offline, p.Lag)
			}
		}
	}
	if err := lister.Err(); err != nil {
		return false, err.Error()
	}
	if n == 0 {
		return false, "no streams"
	}
	return true, ""
}
