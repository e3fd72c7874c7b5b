package proto

import "errors"

// The error catalogue: every error a client can act on has a stable code, sent in the micro service
// error headers (Nats-Service-Error-Code) of a reply and wrapped by Go callers with errors.Is.
var (
	ErrSchema          = errors.New("unsupported schema version")
	ErrMalformed       = errors.New("malformed message")
	ErrBadNumber       = errors.New("non-finite or out-of-range number")
	ErrPayloadTooLarge = errors.New("payload too large")
	ErrUnknownTask     = errors.New("unknown task family")
	ErrUnknownSplit    = errors.New("unknown split")
	ErrUnknownSession  = errors.New("unknown or expired session")
	ErrSessionDone     = errors.New("session already finished")
	ErrHostFull        = errors.New("env host at capacity")
	ErrShuttingDown    = errors.New("service shutting down")
	ErrEnvTimeout      = errors.New("env call timed out")
	ErrEnvUnavailable  = errors.New("env host unavailable")
	ErrInternal        = errors.New("internal error")
)

// ErrorCodes maps each catalogued error to its wire code (HTTP-like, as micro uses).
var ErrorCodes = map[error]string{
	ErrSchema:          "400",
	ErrMalformed:       "400",
	ErrBadNumber:       "400",
	ErrPayloadTooLarge: "413",
	ErrUnknownTask:     "404",
	ErrUnknownSplit:    "404",
	ErrUnknownSession:  "404",
	ErrSessionDone:     "409",
	ErrHostFull:        "503",
	ErrShuttingDown:    "503",
	ErrEnvTimeout:      "504",
	ErrEnvUnavailable:  "503",
	ErrInternal:        "500",
}

// ErrorFromWire returns the catalogued error whose text starts the description, or ErrInternal.
func ErrorFromWire(description string) error {
	for e := range ErrorCodes {
		msg := e.Error()
		if len(description) >= len(msg) && description[:len(msg)] == msg {
			return e
		}
	}
	return ErrInternal
}
