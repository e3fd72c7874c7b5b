package env

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/codec"
)

// batchLinger is how long a step batch's answer waits, after its first step is done, for the others to
// join it in one reply message. Steps still running then are answered in later messages, so a slow
// session delays the rest of its batch by at most this.
const batchLinger = 300 * time.Microsecond

// handleStartBatch opens the sessions of an EnvStartBatch one after another (opening one is quick) and
// answers all of them in one reply (more if it would be too large).
func (h *Host) handleStartBatch(r request) {
	var req proto.EnvStartBatch
	if !h.decodeBatch(r, "starts", &req, func() int { return len(req.Starts) }) {
		return
	}
	results := make([]proto.EnvBatchResult, len(req.Starts))
	for i, sr := range req.Starts {
		if sr.Schema != proto.SchemaVersion {
			results[i] = h.itemError(i, "starts", fmt.Errorf("%w: start %d has schema %d, want %d", proto.ErrSchema, i, sr.Schema, proto.SchemaVersion))
			continue
		}
		rep, err := h.start(sr)
		if err != nil {
			results[i] = h.itemError(i, "starts", err)
			continue
		}
		results[i] = proto.EnvBatchResult{Index: i, Start: rep}
	}
	for _, res := range h.respondBatch(r, "starts", results) {
		if res.Start != nil {
			h.dropUnanswered(res.Start.SessionID)
		}
	}
}

// handleStepBatch runs every step of an EnvStepBatch at once, each on its own goroutine (a step may wait
// on a slow game), and answers with the results ready together: all of them in one message when the
// steps are quick, otherwise those done within batchLinger of the first, then the next ones, and so on.
func (h *Host) handleStepBatch(r request) {
	var req proto.EnvStepBatch
	if !h.decodeBatch(r, "steps", &req, func() int { return len(req.Steps) }) {
		return
	}
	done := make(chan proto.EnvBatchResult, len(req.Steps))
	for i, sr := range req.Steps {
		go func() {
			if sr.Schema != proto.SchemaVersion {
				done <- h.itemError(i, "steps", fmt.Errorf("%w: step %d has schema %d, want %d", proto.ErrSchema, i, sr.Schema, proto.SchemaVersion))
				return
			}
			rep, err := h.stepSession(sr)
			if err != nil {
				done <- h.itemError(i, "steps", err)
				return
			}
			done <- proto.EnvBatchResult{Index: i, Step: rep}
		}()
	}
	// Every step goroutine sends exactly once, so this loop owns them: it returns when all have.
	for left := len(req.Steps); left > 0; {
		ready := []proto.EnvBatchResult{<-done}
		linger := time.NewTimer(batchLinger)
	gather:
		for len(ready) < left {
			select {
			case res := <-done:
				ready = append(ready, res)
			case <-linger.C:
				break gather
			}
		}
		linger.Stop()
		left -= len(ready)
		h.respondBatch(r, "steps", ready)
	}
}

// decodeBatch decodes a batch request into v and checks its number of calls, answering a request it
// refuses with an error reply (counted); it says whether the batch is to be served.
func (h *Host) decodeBatch(r request, endpoint string, v any, calls func() int) bool {
	err := codec.Unmarshal(r.data, v)
	if err == nil {
		switch n := calls(); {
		case n == 0:
			err = fmt.Errorf("%w: a batch with no calls", proto.ErrMalformed)
		case n > proto.MaxEnvBatchItems:
			err = fmt.Errorf("%w: a batch of %d calls, at most %d", proto.ErrPayloadTooLarge, n, proto.MaxEnvBatchItems)
		}
	}
	if err != nil {
		h.failWrapped(r, endpoint, err)
		return false
	}
	return true
}

// itemError is the result of a call that failed, as its single call's error reply would say it (counted
// by endpoint and code like those).
func (h *Host) itemError(i int, endpoint string, err error) proto.EnvBatchResult {
	known, detail := proto.ErrInternal, err.Error()
	for e := range proto.ErrorCodes {
		if errors.Is(err, e) {
			known, detail = e, strings.TrimPrefix(strings.TrimPrefix(err.Error(), e.Error()), ": ")
			break
		}
	}
	desc := known.Error()
	if detail != "" {
		desc += ": " + detail
	}
	code := proto.ErrorCodes[known]
	h.errorsTotal.WithLabelValues(endpoint, code).Inc()
	return proto.EnvBatchResult{Index: i, Error: desc, Code: code}
}

// respondBatch sends results in one EnvBatchReply, or in several when one would pass MaxEnvBatchBytes. A
// result too large even alone is answered as the error a single call would get. It returns the results
// that did not go out as they are: replaced by that error, or in a reply the connection refused.
func (h *Host) respondBatch(r request, endpoint string, results []proto.EnvBatchResult) (unsent []proto.EnvBatchResult) {
	b, err := codec.Marshal(proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: results}, proto.MaxEnvBatchBytes)
	switch {
	case err == nil:
	case errors.Is(err, proto.ErrPayloadTooLarge) && len(results) > 1:
		unsent = h.respondBatch(r, endpoint, results[:len(results)/2])
		return append(unsent, h.respondBatch(r, endpoint, results[len(results)/2:])...)
	default:
		res := results[0]
		h.respondBatch(r, endpoint, []proto.EnvBatchResult{h.itemError(res.Index, endpoint, err)})
		return results
	}
	if err := h.deps.Conn.Publish(r.reply, b); err != nil {
		h.deps.Log.Warn().Err(err).Str("endpoint", endpoint).Msg("reply failed")
		return results
	}
	return nil
}
