package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jetrl/jetrl/proto"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// RunConfig is the run's settings as recorded in KV (proto.BucketRun, key proto.KeyRunConfig) by `jetrl up`
// and `jetrl config set`: a JSON object keyed by setting name, the flag name in snake_case (batch_size,
// task_weights, ...). Numbers are json.Number.
type RunConfig map[string]any

// ErrMalformedRunConfig is the error of a run config record that is not a JSON object of settings.
var ErrMalformedRunConfig = errors.New("malformed run config")

// ParseRunConfig decodes a run config record.
func ParseRunConfig(data []byte) (RunConfig, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var rc RunConfig
	err := dec.Decode(&rc)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err == nil && rc == nil {
		err = errors.New("null instead of a JSON object")
	}
	if err != nil {
		return nil, fmt.Errorf("%w (KV %s/%s): want a JSON object of settings: %v", ErrMalformedRunConfig, proto.BucketRun, proto.KeyRunConfig, err)
	}
	return rc, nil
}

// ReadRunConfig reads the run config from KV. An absent bucket, key or a deleted key is no run config
// (nil, nil); a record that does not decode is ErrMalformedRunConfig.
func ReadRunConfig(ctx context.Context, js jetstream.JetStream) (RunConfig, error) {
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("run config: kv %s: %w", proto.BucketRun, err)
	}
	e, err := kv.Get(ctx, proto.KeyRunConfig)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("run config: kv %s/%s: %w", proto.BucketRun, proto.KeyRunConfig, err)
	}
	return ParseRunConfig(e.Value())
}

// Key is the run config key of a flag: its name in snake_case.
func Key(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

// ownFlags are the flags a process never takes from the run config: Common's (connection, logging,
// metrics, replicas: the process's own, and `jetrl up` records its own values under some of these names),
// identities (each replica has its own), and help. A flag tagged `runconfig:"-"` is never taken either.
var ownFlags = func() map[string]bool {
	own := map[string]bool{"id": true, "host-id": true, "help": true}
	t := reflect.TypeFor[Common]()
	for i := 0; i < t.NumField(); i++ {
		if name := t.Field(i).Tag.Get("name"); name != "" {
			own[name] = true
		}
	}
	return own
}()

// resolver is a kong.Resolver that gives a flag the run config's value for its key when neither the
// command line nor the flag's environment variable gave one. kong asks resolvers only about flags missing
// from the command line, but it lets a resolver override an environment variable, so it checks those
// itself. A bool flag named no-X takes the negation of key X when the run config has no key no_X (the
// normalizer's --no-task-norm and `jetrl up`'s task_norm).
type resolver struct {
	values RunConfig
	taken  map[string]string // key → the value as the command line would give it
}

func (r *resolver) Validate(*kong.Application) error { return nil }

func (r *resolver) Resolve(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	tag := flag.Tag
	if tag == nil {
		tag = &kong.Tag{}
	}
	if ownFlags[flag.Name] || tag.Get("runconfig") == "-" {
		return nil, nil
	}
	for _, env := range tag.Envs { // what kong's Value.Reset reads
		if _, set := os.LookupEnv(env); set {
			return nil, nil
		}
	}
	key := Key(flag.Name)
	v, ok := r.values[key]
	negate := false
	if !ok && flag.IsBool() && strings.HasPrefix(key, "no_") {
		key = strings.TrimPrefix(key, "no_")
		v, ok = r.values[key]
		negate = true
	}
	if !ok || v == nil {
		return nil, nil
	}
	s, err := render(v, flag, negate)
	if err != nil {
		return nil, fmt.Errorf("run config %s: %w", key, err)
	}
	if s == "" && isCollection(v) {
		return nil, nil // an empty list or map: nothing to take
	}
	if negate {
		r.taken[Key(flag.Name)] = s
	} else {
		r.taken[key] = s
	}
	return s, nil
}

func isCollection(v any) bool {
	switch v.(type) {
	case []any, map[string]any:
		return true
	}
	return false
}

// render gives a run config value as the command line or an environment variable would give it, so kong
// parses it the same way: lists joined by the flag's separator, maps as k=v joined by its map separator.
func render(v any, flag *kong.Flag, negate bool) (string, error) {
	if negate {
		b, ok := v.(bool)
		if !ok {
			return "", fmt.Errorf("%v is not true or false (--%s is its negation)", v, flag.Name)
		}
		return strconv.FormatBool(!b), nil
	}
	sep, mapSep := ",", ","
	if flag.Tag != nil {
		if flag.Tag.Sep > 0 {
			sep = string(flag.Tag.Sep)
		}
		if flag.Tag.MapSep > 0 {
			mapSep = string(flag.Tag.MapSep)
		}
	}
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := scalar(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, sep), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			s, err := scalar(x[k])
			if err != nil {
				return "", err
			}
			parts[i] = k + "=" + s
		}
		return strings.Join(parts, mapSep), nil
	default:
		return scalar(v)
	}
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case time.Duration:
		return x.String(), nil
	default:
		return "", fmt.Errorf("%v (%T) is not a string, number or bool", v, v)
	}
}

// CLI is a service's command line: a struct that embeds Common (pass a pointer to it).
type CLI interface{ common() *Common }

func (c *Common) common() *Common { return c }

// Parse parses args into cli with kong. With a run config, every flag that args and its environment
// variable leave unset takes the run config's value when it has one (command line > environment > run
// config > default), except Common's flags and identities; it returns what it took, by key. options are
// passed to kong.New.
func Parse(cli CLI, args []string, rc RunConfig, options ...kong.Option) (taken map[string]string, err error) {
	opts := append([]kong.Option{}, options...)
	var r *resolver
	if rc != nil {
		r = &resolver{values: rc, taken: map[string]string{}}
		opts = append(opts, kong.Resolvers(r))
	}
	k, err := kong.New(cli, opts...)
	if err != nil {
		return nil, err
	}
	if _, err := k.Parse(args); err != nil {
		return nil, err
	}
	if r == nil {
		return nil, nil
	}
	return r.taken, nil
}

// Main is a whole service process, what its main function calls: it parses the command line and
// environment into cli, connects, makes sure the topology exists, then (unless --no-run-config) reads the
// run config from KV and parses again with it, so that every setting not given by flag or environment
// variable comes from the run config, logs what it took, and runs the service like Run. An absent run
// config is nothing to take; a malformed one, or a value that does not parse, stops the process with an
// error that says so. It exits with status 1 when the process fails.
func Main(name, description string, cli CLI, run func(ctx context.Context, p Process) error) {
	opts := []kong.Option{kong.Name("jetrl-" + name), kong.Description(description), kong.UsageOnError()}
	k, err := kong.New(cli, opts...)
	if err != nil {
		panic(err)
	}
	args := os.Args[1:]
	_, err = k.Parse(args)
	k.FatalIfErrorf(err)
	k.FatalIfErrorf(Start(name, cli, args, run, opts...))
}

// Start is Main after the first parse of args into cli: the process from the connection on, with the run
// config taken before the service runs. options are the kong options of the parse.
func Start(name string, cli CLI, args []string, run func(ctx context.Context, p Process) error, options ...kong.Option) error {
	c := *cli.common()
	return serve(name, c, func(ctx context.Context, js jetstream.JetStream, log zerolog.Logger) error {
		if !c.RunConfig {
			log.Info().Msg("run config off (--no-run-config): settings from flags, environment and defaults")
			return nil
		}
		rc, err := readRunConfigRetrying(ctx, js)
		if err != nil {
			return err
		}
		if rc == nil {
			log.Info().Str("kv", proto.BucketRun+"/"+proto.KeyRunConfig).Msg("no run config: settings from flags, environment and defaults")
			return nil
		}
		taken, err := Parse(cli, args, rc, options...)
		if err != nil {
			// Not wrapped: only the run config differs from the first parse, and this is not a usage error.
			return fmt.Errorf("run config (KV %s/%s, written by jetrl up or jetrl config set): %s", proto.BucketRun, proto.KeyRunConfig, err)
		}
		keys := make([]string, 0, len(taken))
		for k := range taken {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := zerolog.Dict()
		for _, k := range keys {
			d = d.Str(k, taken[k])
		}
		log.Info().Str("kv", proto.BucketRun+"/"+proto.KeyRunConfig).Dict("settings", d).
			Msgf("%d settings taken from the run config (flags and environment variables take precedence)", len(keys))
		return nil
	}, run)
}

// readRunConfigRetrying reads the run config; a read that fails for another reason than an absent or
// malformed record (a cluster still electing leaders) is retried like the topology.
func readRunConfigRetrying(ctx context.Context, js jetstream.JetStream) (RunConfig, error) {
	var rc RunConfig
	var final error
	err := retryEach(ctx, topologyAttempt, topologyDeadline, func(actx context.Context) error {
		var err error
		rc, err = ReadRunConfig(actx, js)
		if errors.Is(err, ErrMalformedRunConfig) {
			final = err
			return nil
		}
		return err
	})
	if final != nil {
		return nil, final
	}
	return rc, err
}
