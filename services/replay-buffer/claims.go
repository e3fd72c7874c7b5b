package replaybuffer

import (
	"context"
	"errors"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// claimsEvery is how often the buffer looks at the rollout instances' last claims: a quarter of the group
// timeout, at least 100ms and at most 30s.
func (c *Config) claimsEvery() time.Duration {
	return min(max(c.GroupTimeout/4, 100*time.Millisecond), 30*time.Second)
}

// recoverClaims looks at each rollout instance's last claim (proto.Admission.Claims) once the instance
// has been silent for the group timeout, as this buffer heard it (dead; one cut off from NATS that long has
// its groups timed out already, and published its last marker right after its claim). A claim whose group
// this buffer knows, or whose start marker the instance published (see announced), is removed. For any
// other the instance died between its claim and its marker: the buffer publishes the marker in its stead
// (the same message id, so a marker the instance sends after all is a duplicate the stream drops, and one
// it sent already makes this one a duplicate: the claim is then removed), and the group times out as any
// whose rollout died, giving its admissions back; the claim is removed on a later look, once the buffer
// holds the group.
func (b *Buffer) recoverClaims(ctx context.Context, js jetstream.JetStream, counter *admission.Counter, groups jetstream.Stream, now time.Time, log zerolog.Logger) {
	b.live.pruneInstances(now, 2*b.cfg.GroupTimeout)
	a, _, err := counter.Read(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("admission claims not read; looked at again later")
		return
	}
	for instance, c := range a.Claims {
		if !b.live.silentFor(instance, now, b.heardSince, b.cfg.GroupTimeout) {
			continue
		}
		clog := log.With().Str("instance", instance).Str("group", c.GroupID).Str("rollout", c.RolloutID).Logger()
		start := c.Start()
		if err := start.Validate(); err != nil || !proto.Token(instance) {
			// Not a claim a rollout of this release writes: nothing can be announced for it.
			if err == nil {
				err = errors.New("instance is not a subject token")
			}
			clog.Warn().Err(err).Int("group_size", c.GroupSize).Msg("malformed admission claim removed")
			b.dropClaim(ctx, counter, instance, c, clog)
			continue
		}
		known, err := b.announced(ctx, groups, instance, c)
		if err != nil {
			clog.Warn().Err(err).Msg("silent rollout instance's last marker not read; looked at again later")
			continue
		}
		if known {
			b.dropClaim(ctx, counter, instance, c, clog)
			continue
		}
		gone, err := markerGone(ctx, groups, c)
		if err != nil {
			clog.Warn().Err(err).Msg("groups stream not read; silent rollout instance's claim looked at again later")
			continue
		}
		if gone {
			// Its marker may have been published and removed since: announcing the group could give its
			// admissions back a second time. The claim is left as the replica left it, held.
			clog.Warn().Int64("claimed_at", c.ClaimedAt).Msg("silent rollout instance's last claim older than the groups stream's oldest marker; removed without announcing it")
			b.dropClaim(ctx, counter, instance, c, clog)
			continue
		}
		data, err := codec.Marshal(start, 0)
		var ack *jetstream.PubAck
		if err == nil {
			ack, err = bus.PublishGroupStart(ctx, js, instance, c.GroupID, data)
		}
		if err != nil {
			clog.Warn().Err(err).Msg("start marker of a silent rollout instance's last claim not published; tried again later")
			continue
		}
		if ack.Duplicate { // the instance's own marker is in the stream after all
			b.dropClaim(ctx, counter, instance, c, clog)
			continue
		}
		b.count(func(s *Stats) { s.ClaimsAnnounced++ })
		b.claimsAnnounced.Inc()
		clog.Warn().Int("group_size", c.GroupSize).Int64("start_version", c.StartVersion).
			Msg("rollout instance went silent between an admission claim and its group's start marker; marker published for it, so the group's admissions come back")
	}
}

// announced reports whether claim c, instance's last, is known to be announced: this buffer holds or
// settled its group, an earlier buffer gave admissions back for it, or the last marker on the instance's
// subject is its group's or a later one's (started at or after the claim, by the instance's clock: a
// replica publishes its markers in the order of its claims, and one whose claim failed without landing
// announces that group all the same).
func (b *Buffer) announced(ctx context.Context, groups jetstream.Stream, instance string, c proto.AdmissionClaim) (bool, error) {
	groupID := c.GroupID
	if _, ok := b.groups[groupID]; ok {
		return true, nil
	}
	if _, ok := b.readyIDs[groupID]; ok {
		return true, nil
	}
	if _, ok := b.released[groupID]; ok {
		return true, nil
	}
	if _, ok := b.prior[proto.RefundKey(groupID)]; ok {
		return true, nil
	}
	m, err := groups.GetLastMsgForSubject(ctx, proto.SubjectGroupStartOf(instance))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var gs proto.GroupStart
	if err := codec.Unmarshal(m.Data, &gs); err != nil {
		return false, nil // not a marker this release writes: the claim's is not there
	}
	return gs.GroupID == groupID || gs.StartedAt >= c.ClaimedAt, nil
}

// markerGone reports whether the groups stream may have removed a marker published after claim c: it has
// dropped messages (its age or size limit, or a purge), and the oldest it keeps is younger than the claim.
func markerGone(ctx context.Context, groups jetstream.Stream, c proto.AdmissionClaim) (bool, error) {
	info, err := groups.Info(ctx)
	if err != nil {
		return false, err
	}
	st := info.State
	if st.FirstSeq <= 1 {
		return false, nil
	}
	return st.Msgs == 0 || c.ClaimedAt < st.FirstTime.UnixNano(), nil
}

// dropClaim removes instance's last claim if it is still c.
func (b *Buffer) dropClaim(ctx context.Context, counter *admission.Counter, instance string, c proto.AdmissionClaim, log zerolog.Logger) {
	removed, err := counter.DropClaim(ctx, instance, &c)
	if err != nil {
		log.Warn().Err(err).Msg("silent rollout instance's admission claim not removed; tried again later")
		return
	}
	if removed {
		b.count(func(s *Stats) { s.ClaimsRemoved++ })
	}
}

// recordRefreshAge is how old a held group's refund record may grow before it is written again: half the
// bucket's TTL (proto.RefundsTTL), which counts from the last write.
var recordRefreshAge = proto.RefundsTTL / 2

// refreshRecords writes again, unchanged, the refund record of every group this buffer holds (open,
// ready, or unsettled because its refund keeps failing) that it wrote over recordRefreshAge ago, or read
// when it started: without it a group held past the TTL would lose its record, and a buffer taking over
// would give its admissions back again. A failed write is logged and counted, and tried again next time;
// nothing is written while a refund pass is in doubt (a record's write proves ownership by a fence at the
// pass applied, which the counter may have passed).
func (b *Buffer) refreshRecords(ctx context.Context, counter *admission.Counter, now time.Time) {
	if b.refundKV == nil || b.doubt != nil || b.passMoved != nil {
		return
	}
	for g := range b.heldGroups() {
		if g.recordRev == 0 || now.Sub(g.recordAt) <= recordRefreshAge {
			continue
		}
		if err := b.writeRecord(ctx, counter, g, g.record); err != nil {
			b.count(func(s *Stats) { s.RefundRecordRefreshErrors++ })
			b.deps.Log.Warn().Err(err).Str("group", g.id).Msg("refund record not written again; its TTL may expire it while the group is held")
			if b.passMoved != nil || ctx.Err() != nil {
				return // another buffer owns the counter (the run loop stops), or the writes' time is up
			}
			continue
		}
		b.count(func(s *Stats) { s.RefundRecordsRefreshed++ })
	}
}
