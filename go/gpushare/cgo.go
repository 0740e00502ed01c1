package gpushare

/*
#cgo pkg-config: gpushare_c
#include <stdlib.h>
#include <string.h>
#include <gpushare/c/gpushare.h>

// The empty string, for a (pointer, length) argument of length 0, so that
// the library never sees a NULL pointer where it expects a string; and the
// watch event types, NUL-terminated, without a copy per call. Not static:
// Go refers to them by symbol (this preamble is in one file only).
const char gsgo_empty[1] = "";
const char gsgo_added[] = "ADDED";
const char gsgo_modified[] = "MODIFIED";
const char gsgo_deleted[] = "DELETED";

// gs_names is built here, on the C stack, so that Go passes only pointers
// to memory that holds no Go pointers (the cgo pointer rules).
static gs_status* gsgo_filter(const gs_scheduler* s, const gs_pod* pod, const char* names,
                              const uint32_t* lengths, size_t count, int all,
                              gs_fit_results** out) {
  if (all) return gs_scheduler_filter(s, pod, NULL, out);
  gs_names n;
  n.names = names;
  n.lengths = lengths;
  n.count = count;
  return gs_scheduler_filter(s, pod, &n, out);
}

static gs_status* gsgo_rank(const gs_scheduler* s, const gs_pod* pod, const char* names,
                            const uint32_t* lengths, size_t count, int64_t* ranks) {
  gs_names n;
  n.names = names;
  n.lengths = lengths;
  n.count = count;
  return gs_scheduler_rank(s, pod, &n, ranks);
}

static gs_status* gsgo_fit_after(const gs_scheduler* s, const gs_pod* pod, const char* node,
                                 size_t node_len, const char* names, const uint32_t* lengths,
                                 size_t count, const gs_pod* const* added, size_t added_count,
                                 int* feasible, int* unresolvable, char** reason) {
  gs_names n;
  n.names = names;
  n.lengths = lengths;
  n.count = count;
  return gs_scheduler_fit_after(s, pod, node, node_len, &n, added, added_count, feasible,
                                unresolvable, reason);
}
*/
import "C"

import (
	"math"
	"runtime"
	"strings"
	"unsafe"
)

// strArg passes a Go string to a (pointer, length) parameter without a copy:
// the bytes of a string hold no Go pointers, so C may read them for the
// duration of the call (the library copies what it keeps).
func strArg(s string) (*C.char, C.size_t) {
	if len(s) == 0 {
		return &C.gsgo_empty[0], 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// bytesArg is strArg for a byte slice (a JSON document).
func bytesArg(b []byte) (*C.char, C.size_t) {
	if len(b) == 0 {
		return &C.gsgo_empty[0], 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.SliceData(b))), C.size_t(len(b))
}

// eventTypeArg is the NUL-terminated `type` of a watch event. The three
// known types are static C strings; any other is copied (the library then
// rejects it with its own message) and freed by the returned function.
func eventTypeArg(t string) (*C.char, func()) {
	switch t {
	case EventAdded:
		return &C.gsgo_added[0], func() {}
	case EventModified:
		return &C.gsgo_modified[0], func() {}
	case EventDeleted:
		return &C.gsgo_deleted[0], func() {}
	}
	c := C.CString(strings.ReplaceAll(t, "\x00", "\\0"))
	return c, func() { C.free(unsafe.Pointer(c)) }
}

// names packs node names as gs_names wants them: one buffer holding the
// names back to back and one length per name. Both are Go memory without
// Go pointers, passed to C as plain arguments.
type names struct {
	buf     []byte
	lengths []uint32
}

func packNames(nodes []string) (names, error) {
	total := 0
	for _, n := range nodes {
		if len(n) > math.MaxUint32 {
			return names{}, &Error{Code: InvalidArgument, Message: "a node name is longer than 4 GiB"}
		}
		total += len(n)
	}
	out := names{buf: make([]byte, 0, total), lengths: make([]uint32, len(nodes))}
	for i, n := range nodes {
		out.buf = append(out.buf, n...)
		out.lengths[i] = uint32(len(n))
	}
	return out, nil
}

func (n *names) args() (*C.char, *C.uint32_t, C.size_t) {
	buf, _ := bytesArg(n.buf)
	var lengths *C.uint32_t
	if len(n.lengths) > 0 {
		lengths = (*C.uint32_t)(unsafe.Pointer(unsafe.SliceData(n.lengths)))
	}
	return buf, lengths, C.size_t(len(n.lengths))
}

// cargs builds the NUL-terminated strings and the arrays that the C structs
// of one call (gs_node, gs_request, gs_scheduler_options) point to. They are
// Go memory, pinned until release() so that a struct holding pointers to
// them may be passed to C (runtime.Pinner, the cgo pointer rules).
type cargs struct {
	pinner runtime.Pinner
}

// str is a pinned NUL-terminated copy of s. `what` names the value in the
// error for a string C cannot carry (one holding a NUL byte).
func (a *cargs) str(what, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, &Error{Code: InvalidArgument, Message: what + " holds a NUL byte"}
	}
	b := make([]byte, len(s)+1)
	copy(b, s)
	a.pinner.Pin(&b[0])
	return (*C.char)(unsafe.Pointer(&b[0])), nil
}

// strs is a pinned array of pinned NUL-terminated copies; nil for none.
func (a *cargs) strs(what string, ss []string) (**C.char, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	p := make([]*C.char, len(ss))
	for i, s := range ss {
		c, err := a.str(what, s)
		if err != nil {
			return nil, err
		}
		p[i] = c
	}
	a.pinner.Pin(&p[0])
	return &p[0], nil
}

func (a *cargs) int64s(v []int64) *C.int64_t {
	if len(v) == 0 {
		return nil
	}
	a.pinner.Pin(&v[0])
	return (*C.int64_t)(unsafe.Pointer(&v[0]))
}

func (a *cargs) release() { a.pinner.Unpin() }

// goBytes copies a NUL-terminated C string into a new byte slice.
func goBytes(s *C.char) []byte {
	if s == nil {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(s), C.int(C.strlen(s)))
}

// takeString copies a string the caller must free, then frees it.
func takeString(s *C.char) string {
	if s == nil {
		return ""
	}
	out := C.GoString(s)
	C.gs_string_free(s)
	return out
}

// filterCall and rankCall pass `n` as gs_names (see gsgo_filter).
func filterCall(h *C.gs_scheduler, p *C.gs_pod, n *names, all bool, out **C.gs_fit_results) *C.gs_status {
	buf, lengths, count := n.args()
	return C.gsgo_filter(h, p, buf, lengths, count, cBool(all), out)
}

func rankCall(h *C.gs_scheduler, p *C.gs_pod, n *names, ranks []int64) *C.gs_status {
	buf, lengths, count := n.args()
	out := (*C.int64_t)(unsafe.Pointer(unsafe.SliceData(ranks)))
	return C.gsgo_rank(h, p, buf, lengths, count, out)
}

func fitAfterCall(h *C.gs_scheduler, p *C.gs_pod, node string, removed *names,
	added []*C.gs_pod, feasible, unresolvable *C.int, reason **C.char) *C.gs_status {
	n, l := strArg(node)
	buf, lengths, count := removed.args()
	var a **C.gs_pod
	if len(added) > 0 {
		a = (**C.gs_pod)(unsafe.Pointer(unsafe.SliceData(added)))
	}
	return C.gsgo_fit_after(h, p, n, l, buf, lengths, count, a, C.size_t(len(added)),
		feasible, unresolvable, reason)
}
