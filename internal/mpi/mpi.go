//go:build mpi

package mpi

/*
#define _GNU_SOURCE
#include <link.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

// gompi_onstack adds SA_ONSTACK to every signal handler installed without
// it: MPI libraries install some (MPICH's SIGUSR1, which its launcher
// sends when a rank dies; OpenMPI's backtrace on SIGSEGV), and the Go
// runtime dies of a handler that runs on a goroutine's stack.
static void gompi_onstack(void) {
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sigaction(sig, NULL, &sa) != 0) continue;
		if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) continue;
		if (sa.sa_flags & SA_ONSTACK) continue;
		sa.sa_flags |= SA_ONSTACK;
		sigaction(sig, &sa, NULL);
	}
}

// gompi_libs_cb appends to out (a buffer of 512 bytes) the path of each
// loaded object named like an MPI library: two of them mean the program was
// linked with the flags of one MPI and the compiler wrapper of another.
static int gompi_libs_cb(struct dl_phdr_info *info, size_t size, void *out) {
	const char *name = info->dlpi_name;
	if (!name || !*name) return 0;
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	if (strncmp(base, "libmpi.so", 9) != 0 && strncmp(base, "libmpich.so", 11) != 0) return 0;
	size_t used = strlen(out);
	if (used + strlen(name) + 3 < 512) {
		if (used) strcat(out, ", ");
		strcat(out, name);
	}
	return 0;
}

static int gompi_libs(char *out) {
	out[0] = 0;
	dl_iterate_phdr(gompi_libs_cb, out);
	int n = 0;
	for (const char *p = out; *p; p++) n += *p == ',';
	return out[0] ? n + 1 : 0;
}

// gompi_header names the MPI whose mpi.h this file was compiled with.
static const char *gompi_header(void) {
#if defined(OPEN_MPI)
	return "Open MPI";
#elif defined(MPICH_VERSION)
	return "MPICH";
#else
	return "";
#endif
}

static void gompi_libversion(char *buf) {
	int n = 0;
	if (MPI_Get_library_version(buf, &n) != MPI_SUCCESS) n = 0;
	buf[n] = 0;
}

static int gompi_init(int *rank, int *size, int *serialized) {
	int provided;
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
	if (rc != MPI_SUCCESS) return rc;
	*serialized = provided >= MPI_THREAD_SERIALIZED;
	gompi_onstack();
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_size(MPI_COMM_WORLD, size);
}

static int gompi_isend(void *buf, int n, int dest, int tag, MPI_Request *req) {
	return MPI_Isend(buf, n, MPI_BYTE, dest, tag, MPI_COMM_WORLD, req);
}

static int gompi_irecv(void *buf, int n, int src, int tag, MPI_Request *req) {
	return MPI_Irecv(buf, n, MPI_BYTE, src, tag, MPI_COMM_WORLD, req);
}

// gompi_improbe matches the next message with tag from any rank, if one has
// come: *flag says so, *src and *n are its sender and size.
static int gompi_improbe(int tag, int *flag, MPI_Message *msg, int *src, int *n) {
	MPI_Status st;
	int rc = MPI_Improbe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, flag, msg, &st);
	if (rc != MPI_SUCCESS || !*flag) return rc;
	*src = st.MPI_SOURCE;
	return MPI_Get_count(&st, MPI_BYTE, n);
}

static int gompi_imrecv(void *buf, int n, MPI_Message *msg, MPI_Request *req) {
	return MPI_Imrecv(buf, n, MPI_BYTE, msg, req);
}

static MPI_Status *gompi_sts;
static int gompi_stcap;

// gompi_testsome completes what it can of reqs; idx[0:*out] are the
// completed ones and errs[i] the error of idx[i] (MPI_SUCCESS, or the error
// of a failed request).
static int gompi_testsome(int n, MPI_Request *reqs, int *out, int *idx, int *errs) {
	if (n > gompi_stcap) {
		free(gompi_sts);
		gompi_stcap = n * 2;
		gompi_sts = malloc(sizeof(MPI_Status) * gompi_stcap);
	}
	int rc = MPI_Testsome(n, reqs, out, idx, gompi_sts);
	for (int i = 0; i < n; i++) errs[i] = MPI_SUCCESS;
	if (rc == MPI_ERR_IN_STATUS) {
		for (int i = 0; i < *out; i++) errs[i] = gompi_sts[i].MPI_ERROR;
		return MPI_SUCCESS;
	}
	if (rc != MPI_SUCCESS) return rc;
	for (int i = 0; i < *out; i++) {
		int cancelled = 0;
		MPI_Test_cancelled(&gompi_sts[i], &cancelled);
		if (cancelled) errs[i] = -1;
	}
	return rc;
}

static int gompi_cancel(MPI_Request *req) { return MPI_Cancel(req); }

static void gompi_errstr(int rc, char *buf) {
	int n = 0;
	if (MPI_Error_string(rc, buf, &n) != MPI_SUCCESS) n = 0;
	buf[n] = 0;
}

static int gompi_finalize(void) { return MPI_Finalize(); }

// gompi_raw runs n rounds of a raw exchange with peer, with blocking
// calls, as a baseline for benchmarks: a ping-pong of size bytes both ways
// (stream 0), or size bytes to the other side and one byte back (stream 1).
// The initiator sends first.
static char *gompi_rawbuf;
static int gompi_rawcap;

static int gompi_raw(int peer, int tag, int n, int size, int stream, int initiator) {
	if (size > gompi_rawcap || !gompi_rawbuf) { // kept: the baseline pays no page faults
		free(gompi_rawbuf);
		gompi_rawcap = size > 0 ? size : 1;
		gompi_rawbuf = malloc(gompi_rawcap);
		if (!gompi_rawbuf) { gompi_rawcap = 0; return MPI_ERR_NO_MEM; }
		memset(gompi_rawbuf, 1, gompi_rawcap);
	}
	char *buf = gompi_rawbuf;
	int back = stream ? 1 : size;
	int rc = MPI_SUCCESS;
	for (int i = 0; i < n && rc == MPI_SUCCESS; i++) {
		if (initiator) {
			rc = MPI_Send(buf, size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
			if (rc == MPI_SUCCESS) rc = MPI_Recv(buf, back, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			rc = MPI_Recv(buf, size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (rc == MPI_SUCCESS) rc = MPI_Send(buf, back, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
		}
	}
	return rc;
}

*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Built says whether this build has MPI support (the mpi build tag).
const Built = true

// mpiErr turns an MPI return code into an error with the library's text.
func mpiErr(what string, rc C.int) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	if rc == -1 {
		return fmt.Errorf("%s: cancelled", what)
	}
	buf := make([]byte, C.MPI_MAX_ERROR_STRING+1)
	C.gompi_errstr(rc, (*C.char)(unsafe.Pointer(&buf[0])))
	return fmt.Errorf("%s: %s (MPI error %d)", what, C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), int(rc))
}

// request is an MPI request handle; the goroutine holding the engine's
// role alone touches them.
type request = C.MPI_Request

// cInit starts MPI; serialized says whether MPI may be called from any
// thread, one call at a time (else only from this one).
func cInit() (rank, size int, serialized bool, err error) {
	if err := checkLinkedMPI(); err != nil {
		return 0, 0, false, err
	}
	var r, s, ser C.int
	if err := mpiErr("MPI_Init_thread", C.gompi_init(&r, &s, &ser)); err != nil {
		return 0, 0, false, err
	}
	if s == 1 && LaunchSize() > 1 {
		_, first := libraryVersion()
		return 0, 0, false, fmt.Errorf("the launcher started %d ranks but MPI sees this process alone: the program runs %q, not the launcher's MPI; start it with that MPI's mpirun, or build it for the launcher's MPI (-tags mpi,mpich or -tags mpi,openmpi; with CC=mpicc.X, -tags mpi,mpicc)", LaunchSize(), first)
	}
	return int(r), int(s), ser != 0, nil
}

// checkLinkedMPI refuses a program that links two MPI libraries, or that
// was compiled with one MPI's header and runs another's library: both come
// of mixing CC=mpicc.X with a tag that takes flags from pkg-config, and
// both fail later in ways that do not say why.
func checkLinkedMPI() error {
	var libs [512]C.char
	if C.gompi_libs(&libs[0]) > 1 {
		return fmt.Errorf("this program links two MPI libraries (%s): with CC=mpicc.openmpi or CC=mpicc.mpich build with -tags mpi,mpicc; without it, -tags mpi takes the default MPI from pkg-config (-tags mpi,mpich or mpi,openmpi pick one)", C.GoString(&libs[0]))
	}
	header := C.GoString(C.gompi_header())
	lib, first := libraryVersion()
	if header != "" && lib != "" && !strings.Contains(lib, header) {
		return fmt.Errorf("this program was compiled with %s's mpi.h but runs the MPI library %q: build it again with one MPI (-tags mpi,mpicc with CC=mpicc.X, or -tags mpi alone)", header, first)
	}
	return nil
}

// libraryVersion is MPI_Get_library_version's text (which may be asked for
// before MPI_Init), and its first line, trimmed, for messages.
func libraryVersion() (text, first string) {
	var ver [C.MPI_MAX_LIBRARY_VERSION_STRING + 1]C.char
	C.gompi_libversion(&ver[0])
	text = C.GoString(&ver[0])
	first, _, _ = strings.Cut(text, "\n")
	return text, strings.TrimSpace(first)
}

func bufPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func cIsend(o *Req, req *request) error {
	return mpiErr(fmt.Sprintf("MPI_Isend of %d bytes to rank %d", len(o.buf), o.rank),
		C.gompi_isend(bufPtr(o.buf), C.int(len(o.buf)), C.int(o.rank), C.int(o.tag), req))
}

func cIrecv(o *Req, req *request) error {
	return mpiErr(fmt.Sprintf("MPI_Irecv of %d bytes from rank %d", len(o.buf), o.rank),
		C.gompi_irecv(bufPtr(o.buf), C.int(len(o.buf)), C.int(o.rank), C.int(o.tag), req))
}

// cProbe matches a message with tag if one has come, and starts receiving
// it into a new buffer: o is nil if none has come.
func cProbe(tag int, req *request) (*Req, error) {
	var flag, src, n C.int
	var msg C.MPI_Message
	if err := mpiErr("MPI_Improbe", C.gompi_improbe(C.int(tag), &flag, &msg, &src, &n)); err != nil || flag == 0 {
		return nil, err
	}
	o := &Req{kind: opProbed, rank: int(src), tag: tag, buf: make([]byte, int(n))}
	o.pin.Pin(unsafe.SliceData(o.buf))
	if err := mpiErr(fmt.Sprintf("MPI_Imrecv of %d bytes from rank %d", n, src),
		C.gompi_imrecv(bufPtr(o.buf), n, &msg, req)); err != nil {
		o.pin.Unpin()
		return nil, err
	}
	return o, nil
}

// cTestsome completes what it can of reqs; idx and errs get the completed
// indexes and their errors.
func cTestsome(reqs []request, idx, errs []C.int) (int, error) {
	var out C.int
	rc := C.gompi_testsome(C.int(len(reqs)), &reqs[0], &out, &idx[0], &errs[0])
	if err := mpiErr("MPI_Testsome", rc); err != nil {
		return 0, err
	}
	if out == C.MPI_UNDEFINED {
		return 0, nil
	}
	return int(out), nil
}

func cCancel(req *request) { C.gompi_cancel(req) }

func cFinalize() error { return mpiErr("MPI_Finalize", C.gompi_finalize()) }

func cRaw(peer, tag, n, size int, stream, initiator bool) error {
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	return mpiErr(fmt.Sprintf("raw exchange with rank %d", peer), C.gompi_raw(C.int(peer), C.int(tag), C.int(n), C.int(size), b(stream), b(initiator)))
}

func cSuccess(e C.int) bool { return e == C.MPI_SUCCESS }

type cint = C.int
