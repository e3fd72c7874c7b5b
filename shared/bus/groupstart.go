package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jetrl/jetrl/proto"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishGroupStart publishes the start marker data (an encoded proto.GroupStart) of group groupID on rollout
// instance instance's subject (proto.SubjectGroupStartOf), with the group's message id. When no stream takes
// that subject (a service of an older release set JETRL_GROUPS back to its own subjects as it started), the
// subjects of this release are added to the stream again and the marker published once more: a marker must
// be on its instance's subject, where the replay-buffer looks for the last one.
func PublishGroupStart(ctx context.Context, js jetstream.JetStream, instance, groupID string, data []byte) (*jetstream.PubAck, error) {
	subject, id := proto.SubjectGroupStartOf(instance), "start-"+groupID
	ack, err := PublishOnce(ctx, js, subject, id, data)
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return ack, err
	}
	if err := ensureGroupSubjects(ctx, js); err != nil {
		return nil, fmt.Errorf("publish %s: %w (and the stream's subjects: %w)", subject, jetstream.ErrNoStreamResponse, err)
	}
	return PublishOnce(ctx, js, subject, id, data)
}

// ensureGroupSubjects adds the subjects proto lists for StreamGroups that the stream lacks.
func ensureGroupSubjects(ctx context.Context, js jetstream.JetStream) error {
	st, err := js.Stream(ctx, proto.StreamGroups) // fetches the stream's info
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	changed := false
	for _, s := range proto.Streams {
		if s.Name != proto.StreamGroups {
			continue
		}
		for _, subj := range s.Subjects {
			if !slices.Contains(cfg.Subjects, subj) {
				cfg.Subjects, changed = append(cfg.Subjects, subj), true
			}
		}
	}
	if !changed {
		return nil
	}
	_, err = js.UpdateStream(ctx, cfg)
	return err
}
