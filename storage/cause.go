package storage

import (
	"errors"
	"strings"
)

// Cause returns what made err happen, in words that are the same for every
// error of that cause whatever the sample, page, byte range, attempt count,
// duration or request: "storage unavailable: connection refused", "storage
// unavailable: request stalled", "object changed since it was opened". Those
// who log errors of reads key on it, to report each cause once rather than
// once per failed read.
//
// For ErrUnavailable it is the innermost error of the last failed attempt;
// for other errors, the message with every run of digits replaced by "N".
func Cause(err error) string {
	if err == nil {
		return ""
	}
	var ue *unavailableError
	switch {
	case errors.As(err, &ue):
		if ue.last == nil {
			return ErrUnavailable.Error()
		}
		return ErrUnavailable.Error() + ": " + attemptCause(ue.last)
	case errors.Is(err, ErrChanged):
		return ErrChanged.Error()
	}
	return collapseDigits(err.Error())
}

// attemptCause is the cause of a failed attempt at a request: the
// innermost error, as the outer ones name the request (object, range,
// server's request ID) rather than what went wrong.
func attemptCause(err error) string { return collapseDigits(innermost(err).Error()) }

// innermost follows err's chain of wrapped errors to its end; of several
// joined errors it follows the last.
func innermost(err error) error {
	for {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[len(errs)-1]
			}
		}
		if next == nil {
			return err
		}
		err = next
	}
}

// collapseDigits replaces every run of ASCII digits in s by "N".
func collapseDigits(s string) string {
	var b strings.Builder
	digits := false
	for _, r := range s {
		if '0' <= r && r <= '9' {
			if !digits {
				b.WriteByte('N')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}
