//go:build containers

// Package containers runs the jetrl mesh from the images `make images` builds (jetrl/<service>:dev,
// jetrl/nats-server:dev) with testcontainers-go: a 3-node NATS JetStream cluster and the five services on
// a private Docker network, as docker-compose.yml does. It is behind the build tag `containers` and in a
// module of its own (outside go.work), so `make test` does not see it; run it with `make test-containers`.
// Ryuk is not used: every container (with its anonymous volumes) and the network are removed in t.Cleanup,
// whether the test passes or fails.
package containers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/nats-io/nats.go"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

// tag is the image tag under test (make images IMAGE_TAG=...).
func tag() string {
	if t := os.Getenv("JETRL_IMAGE_TAG"); t != "" {
		return t
	}
	return "dev"
}

var natsNodes = []string{"nats-1", "nats-2", "nats-3"}

// mesh is a running containerized mesh.
type mesh struct {
	t   *testing.T
	net *testcontainers.DockerNetwork
	// nc is the test's connection to nats-1 through its mapped client port.
	nc *nats.Conn
}

// start runs one container on the mesh's network under alias and schedules its removal (and, when the
// test failed, a dump of its last log lines) in t.Cleanup.
func (m *mesh) start(ctx context.Context, image, alias string, opts ...testcontainers.ContainerCustomizer) *testcontainers.DockerContainer {
	m.t.Helper()
	opts = append([]testcontainers.ContainerCustomizer{
		network.WithNetwork([]string{alias}, m.net),
		testcontainers.WithLabels(map[string]string{"jetrl.test": m.t.Name()}),
	}, opts...)
	c, err := testcontainers.Run(ctx, image, opts...)
	testcontainers.CleanupContainer(m.t, c)
	m.t.Cleanup(func() {
		if m.t.Failed() && c != nil {
			m.t.Logf("--- last log lines of %s (%s)\n%s", alias, image, logTail(c, 15))
		}
	})
	if err != nil {
		m.t.Fatalf("start %s (%s): %v", alias, image, err)
	}
	return c
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

// startMesh starts the 3-node cluster, then env hosts, rollout replicas and one of each other stage.
func startMesh(t *testing.T, ctx context.Context, envHosts, rollouts int) *mesh {
	t.Helper()
	nw, err := network.New(ctx, network.WithLabels(map[string]string{"jetrl.test": t.Name()}))
	testcontainers.CleanupNetwork(t, nw)
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	m := &mesh{t: t, net: nw}

	// The three nodes are started before any is waited for: none is healthy (JetStream current with a
	// meta leader) until a quorum of them has routes to the others.
	var nodes []*testcontainers.DockerContainer
	for _, node := range natsNodes {
		opts := []testcontainers.ContainerCustomizer{
			testcontainers.WithEnv(map[string]string{"NATS_SERVER_NAME": node}),
			testcontainers.WithCmd("-c", "/etc/nats/cluster.conf"),
		}
		if node == "nats-1" {
			opts = append(opts, testcontainers.WithExposedPorts("4222/tcp"))
		}
		nodes = append(nodes, m.start(ctx, "jetrl/nats-server:"+tag(), node, opts...))
	}
	for i, c := range nodes {
		// The image's HEALTHCHECK: /healthz answers ok once this node's JetStream is current.
		if err := wait.ForHealthCheck().WithStartupTimeout(2*time.Minute).WaitUntilReady(ctx, c); err != nil {
			t.Fatalf("%s not healthy: %v", natsNodes[i], err)
		}
	}
	first := nodes[0]

	host, err := first.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// With a local daemon (unix socket) the mapped port is on this machine; testcontainers may otherwise
	// resolve the host as the default gateway when it believes it runs inside a container.
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" && (os.Getenv("DOCKER_HOST") == "" || strings.HasPrefix(os.Getenv("DOCKER_HOST"), "unix://")) {
		host = "127.0.0.1"
	}
	port, err := first.MappedPort(ctx, "4222/tcp")
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("nats://%s:%s", host, port.Port())
	m.nc, err = nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(m.nc.Close)
	t.Logf("NATS cluster up; operator URL %s", url)

	env := map[string]string{
		"JETRL_NATS_URL":        "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222",
		"JETRL_STREAM_REPLICAS": "3",
		"JETRL_METRICS_ADDR":    ":9090",
		"JETRL_TASKS":           "alfworld",
	}
	// As in docker-compose.yml: a service that fails (for instance, the streams' R3 creation timing out
	// while the cluster settles) is restarted by Docker.
	restart := testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		hc.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}
	})
	run := func(service, alias string) {
		m.start(ctx, "jetrl/"+service+":"+tag(), alias, testcontainers.WithEnv(env), restart)
	}
	for _, s := range []string{"trainer", "advantage-normalizer", "replay-buffer"} {
		run(s, s)
	}
	for i := 1; i <= envHosts; i++ {
		run("env", fmt.Sprintf("env-%d", i))
	}
	for i := 1; i <= rollouts; i++ {
		run("rollout", fmt.Sprintf("rollout-%d", i))
	}
	return m
}

// trainerStatus asks the trainer for its counters (jetrl.status.trainer, JSON reply).
func (m *mesh) trainerStatus() (map[string]any, error) {
	msg, err := m.nc.Request("jetrl.status.trainer", nil, 3*time.Second)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, err
	}
	if r.Status == nil {
		return nil, fmt.Errorf("no status in %s", msg.Data)
	}
	return r.Status, nil
}

func number(st map[string]any, key string) float64 {
	f, _ := st[key].(float64)
	return f
}

// TestMeshTrainsInContainers: the images on a private network train: the trainer's policy version and
// episodes trained keep rising, with no batch or episode applied twice.
func TestMeshTrainsInContainers(t *testing.T) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") != "true" {
		t.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	// One rollout replica: several replicas on a replicated (R3) admission bucket currently crash on a
	// compare-and-set conflict they do not recognise (see the report of issue 6); Docker restarts them.
	m := startMesh(t, ctx, 2, 1)

	const wantVersion = 10
	deadline := time.Now().Add(6 * time.Minute)
	var last map[string]any
	var firstVersion float64 = -1
	for time.Now().Before(deadline) {
		st, err := m.trainerStatus()
		if err == nil {
			last = st
			v := number(st, "policy_version")
			if firstVersion < 0 && v > 0 {
				firstVersion = v
				t.Logf("trainer at version %v", v)
			}
			if v >= wantVersion {
				break
			}
		}
		time.Sleep(2 * time.Second)
	}
	if last == nil {
		t.Fatal("the trainer never answered on jetrl.status.trainer")
	}
	t.Logf("trainer: version %v, episodes trained %v, batches %v, duplicate batches %v, duplicate episodes %v",
		last["policy_version"], last["episodes_trained"], last["batches_applied"], last["duplicate_batches"], last["duplicate_episodes"])
	if v := number(last, "policy_version"); v < wantVersion {
		t.Fatalf("policy version %v after 6 minutes, want >= %d", v, wantVersion)
	}
	if number(last, "episodes_trained") <= 0 {
		t.Fatal("no episode trained")
	}
	if d := number(last, "duplicate_batches") + number(last, "duplicate_episodes"); d != 0 {
		t.Fatalf("%v duplicates refused by the trainer, want 0", d)
	}
}
