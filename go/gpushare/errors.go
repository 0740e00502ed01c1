package gpushare

/*
#include <gpushare/c/gpushare.h>
*/
import "C"

import "strconv"

// Code is the canonical error code of a failed call: gs_code of the C ABI,
// which has absl's canonical codes and numbers.
type Code int32

// The codes, as in gs_code.
const (
	OK                 Code = C.GS_OK
	Cancelled          Code = C.GS_CANCELLED
	Unknown            Code = C.GS_UNKNOWN
	InvalidArgument    Code = C.GS_INVALID_ARGUMENT
	DeadlineExceeded   Code = C.GS_DEADLINE_EXCEEDED
	NotFound           Code = C.GS_NOT_FOUND
	AlreadyExists      Code = C.GS_ALREADY_EXISTS
	PermissionDenied   Code = C.GS_PERMISSION_DENIED
	ResourceExhausted  Code = C.GS_RESOURCE_EXHAUSTED
	FailedPrecondition Code = C.GS_FAILED_PRECONDITION
	Aborted            Code = C.GS_ABORTED
	OutOfRange         Code = C.GS_OUT_OF_RANGE
	Unimplemented      Code = C.GS_UNIMPLEMENTED
	Internal           Code = C.GS_INTERNAL
	Unavailable        Code = C.GS_UNAVAILABLE
	DataLoss           Code = C.GS_DATA_LOSS
	Unauthenticated    Code = C.GS_UNAUTHENTICATED
)

var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// String returns the code's canonical name, as absl spells it ("NOT_FOUND").
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE(" + strconv.Itoa(int(c)) + ")"
}

// Error is the error of every failed call: the C library's status (its code
// and the message that names the bad value), or one made on the Go side
// (a closed scheduler or pod, a value the C ABI cannot carry).
//
// Compare with errors.Is against the sentinels: errors.Is(err, ErrNotFound)
// holds for every error whose Code is NotFound; errors.Is(err, ErrClosed)
// only for the closed-object error. Read the fields with errors.As.
type Error struct {
	Code    Code
	Message string
}

// Error returns "CODE: message", as absl::Status::ToString() does.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Is reports whether e matches target: a *Error with the same Code and
// either no Message (a code sentinel such as ErrNotFound) or the same one.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t == nil {
		return false
	}
	return e.Code == t.Code && (t.Message == "" || t.Message == e.Message)
}

// Sentinels for errors.Is, one per code: they match any error of the code.
var (
	ErrCancelled          = &Error{Code: Cancelled}
	ErrUnknown            = &Error{Code: Unknown}
	ErrInvalidArgument    = &Error{Code: InvalidArgument}
	ErrDeadlineExceeded   = &Error{Code: DeadlineExceeded}
	ErrNotFound           = &Error{Code: NotFound}
	ErrAlreadyExists      = &Error{Code: AlreadyExists}
	ErrPermissionDenied   = &Error{Code: PermissionDenied}
	ErrResourceExhausted  = &Error{Code: ResourceExhausted}
	ErrFailedPrecondition = &Error{Code: FailedPrecondition}
	ErrAborted            = &Error{Code: Aborted}
	ErrOutOfRange         = &Error{Code: OutOfRange}
	ErrUnimplemented      = &Error{Code: Unimplemented}
	ErrInternal           = &Error{Code: Internal}
	ErrUnavailable        = &Error{Code: Unavailable}
	ErrDataLoss           = &Error{Code: DataLoss}
	ErrUnauthenticated    = &Error{Code: Unauthenticated}
)

// ErrClosed is returned by the methods of a Scheduler or a Pod after its
// Close. It is a FailedPrecondition error, so errors.Is(err,
// ErrFailedPrecondition) holds for it too.
var ErrClosed = &Error{Code: FailedPrecondition, Message: "gpushare: use of a closed object"}

// statusError turns a gs_status into an *Error and frees it; nil for NULL
// (success).
func statusError(st *C.gs_status) error {
	if st == nil {
		return nil
	}
	e := &Error{
		Code:    Code(C.gs_status_code(st)),
		Message: C.GoString(C.gs_status_message(st)),
	}
	C.gs_status_free(st)
	return e
}
