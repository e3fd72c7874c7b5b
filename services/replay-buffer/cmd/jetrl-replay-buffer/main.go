// Command jetrl-replay-buffer runs the replay-buffer.
package main

import (
	"context"
	"time"

	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/shared/config"
)

type cli struct {
	config.Common
	ID             string        `name:"id" env:"JETRL_REPLAY_BUFFER_ID" help:"This buffer's id, held in its lease (default: the container's hostname when this process is its container's first, pid 1, so a buffer restarted in its container keeps its id in the status and the logs; otherwise random). Its lease holds the id and a token of the run."`
	BatchSize      int           `name:"batch-size" env:"JETRL_BATCH_SIZE" default:"64" help:"Batch size B in episodes."`
	MaxBatchSize   int           `name:"max-batch-size" env:"JETRL_MAX_BATCH_SIZE" default:"0" help:"Most episodes in a batch when more groups are ready (0: twice the batch size)."`
	Eta            int           `name:"eta" env:"JETRL_ETA" default:"2" help:"Staleness bound."`
	GroupTimeout   time.Duration `name:"group-timeout" env:"JETRL_GROUP_TIMEOUT" default:"2m" help:"Release a group missing members after this long."`
	ReplicaTimeout time.Duration `name:"replica-timeout" env:"JETRL_REPLICA_TIMEOUT" default:"10s" help:"Release a group sooner when its rollout replica goes on beating without listing it for this long (a replica that stopped beating is left to the group timeout; negative: off)."`
	MaxQueued      int           `name:"max-queued" env:"JETRL_MAX_QUEUED" default:"2" help:"Most batches released and not yet applied by the trainer (negative: no bound)."`
	Lead           time.Duration `name:"lead" env:"JETRL_LEAD" default:"0s" help:"Compose the next batch this long before the trainer's step is expected to end, although --max-queued batches are queued (0: off)."`
	Cut            float64       `name:"cut" env:"JETRL_CUT" default:"0" help:"When the last batch that can take a group still playing is composed, take the group without the members still playing once this share of it has arrived (0: off; the group then goes stale whole)."`
	LeaseTTL       time.Duration `name:"lease-ttl" env:"JETRL_LEASE_TTL" default:"5s" help:"How long this buffer's lease may go unrenewed before another replay-buffer takes over; one started while another holds the lease stands by until then."`
	TurnStaleness  bool          `name:"turn-staleness" env:"JETRL_TURN_STALENESS" help:"Apply the staleness bound to each turn, by the version that produced it, instead of to the version an episode was admitted under (the replay-buffer and the trainer must agree)."`
}

func main() {
	var c cli
	c.Unbuffered = true // the replay-buffer refuses a connection that sends late what it published while down
	config.Main("replay-buffer", "jetrl replay-buffer: groups episodes and releases batches.", &c, func(ctx context.Context, p config.Process) error {
		id, from := config.ServiceID(c.ID)
		b, err := replaybuffer.New(replaybuffer.Config{ID: id, BatchSize: c.BatchSize, MaxBatchSize: c.MaxBatchSize, Eta: c.Eta, GroupTimeout: c.GroupTimeout, ReplicaTimeout: c.ReplicaTimeout, MaxQueued: c.MaxQueued, Lead: c.Lead, Cut: c.Cut, TurnStaleness: c.TurnStaleness, LeaseTTL: c.LeaseTTL},
			replaybuffer.Deps{Conn: p.Conn, Log: p.Log, Metrics: p.Metrics})
		if err != nil {
			return err
		}
		p.Log.Info().Str("replay_buffer", b.ID()).Str("id_from", from).Msg("replay-buffer id")
		return b.Run(ctx)
	})
}
