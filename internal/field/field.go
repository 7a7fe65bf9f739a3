// Package field is the error type that sweep's configuration structs
// (daemon.Config, uninstall.Config, ...) return from Validate: it names
// the invalid field, so that a command can name the flag that set it, and
// a library caller the field.
package field

import "fmt"

// Error is an invalid field of a configuration.
type Error struct {
	// Field is the field's path in its struct: "Prune.MinAge", "Self.GVR".
	Field string
	Err   error
}

// Errorf returns an *Error for field with a formatted cause.
func Errorf(field, format string, args ...any) error {
	return &Error{Field: field, Err: fmt.Errorf(format, args...)}
}

// Wrap returns err as an *Error for field.
func Wrap(field string, err error) error { return &Error{Field: field, Err: err} }

// Error is the cause alone: the caller knows the field's name for it.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }
