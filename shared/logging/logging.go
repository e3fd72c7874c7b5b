// Package logging builds the zerolog loggers every service uses: one structured line per event.
package logging

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// New returns a logger for one service at the given level ("debug", "info", "warn", "error", "disabled").
// pretty selects human-readable console output instead of JSON lines.
func New(service, level string, pretty bool, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("log level %q: want one of debug, info, warn, error, disabled", level)
	}
	if w == nil {
		w = os.Stderr
	}
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("service", service).Logger(), nil
}
