//go:build mpi

package remote

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cmpi "github.com/goffload/offload/internal/mpi"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
	"github.com/goffload/offload/plugins/remote/mpi"
	"github.com/goffload/offload/plugins/remote/proto"
)

// MPI devices: the program runs as one SPMD job (mpirun -np 3 ./prog). One
// rank is the host (GOFFLOAD_HOST_RANK, default 0). Every other rank serves
// as a device, numbered in rank order. The engine is the socket transport's;
// only the transport below it differs. Package mpi says how frames travel on
// MPI messages.

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name:     "mpi",
		Open:     openMPI,
		Discover: discoverMPI,
		Sole:     cmpi.Launched,
		Order:    40,
		Help:     "mpi[:N]  the ranks of this MPI job other than the host's, one device each (all, or the first N); mpi[KIND] has each serve a device of KIND instead of its CPUs",
		Finish:   FinishMPI,
	})
}

// mpiWorld is this process's part of the MPI job (a *mpi.World). It holds the
// host rank's account of its device ranks.
type mpiWorld struct {
	*mpi.World
	ranks mpi.Ranks

	mu     sync.Mutex
	gen    int            // the host's: sessions begun
	lost   map[int]error  // the host's: device ranks lost
	killed map[int]string // the host's: device ranks killed by Stop (their kernel did not end), with their devices' names
	done   bool           // the host's: MPI ended
}

var world struct {
	once sync.Once
	w    atomic.Pointer[mpiWorld] // set once MPI started
	err  error
}

// mpiWorldInit starts MPI once per process.
func mpiWorldInit() (*mpiWorld, error) {
	world.once.Do(func() {
		w, err := mpi.Start()
		if err != nil {
			world.err = err
			return
		}
		world.w.Store(&mpiWorld{World: w, ranks: w.Ranks(), lost: map[int]error{}, killed: map[int]string{}})
	})
	return world.w.Load(), world.err
}

func discoverMPI() ([]plugin.Device, error) {
	if !cmpi.Launched() {
		return nil, nil
	}
	return openMPI("")
}

// openMPI opens the device ranks, all or the first N, on the host rank.
func openMPI(arg string) ([]plugin.Device, error) {
	if err := engine.CheckTimeout(); err != nil {
		return nil, fmt.Errorf("%w: %w", plugin.ErrBadSpec, err)
	}
	if !cmpi.Launched() {
		return nil, fmt.Errorf("this program was not started by an MPI launcher: run it as mpirun -np 3 %s (one host rank and two device ranks)", os.Args[0])
	}
	w, err := mpiWorldInit()
	if err != nil {
		return nil, err
	}
	if !w.IsHost() {
		return nil, fmt.Errorf("rank %d is a device rank (the host is rank %d): offload.Start serves there and never returns", w.Rank(), w.ranks.Host)
	}
	n := w.ranks.Size - 1
	count, served, err := splitServed("mpi", arg)
	if err != nil {
		return nil, err
	}
	if count != "" {
		v, err := strconv.Atoi(count)
		if err != nil || v < 1 || v > n {
			return nil, fmt.Errorf("%w: mpi:%s: want mpi:N with N from 1 to %d, the device ranks of this job", plugin.ErrBadSpec, arg, n)
		}
		n = v
	}
	if n == 0 {
		return nil, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, fmt.Errorf("%w: MPI ended with offload.Stop, and an MPI program cannot start it again: this job has no MPI devices left (start the runtime once per MPI job, or name other devices)", plugin.ErrKindEnded)
	}
	gen := w.gen
	w.gen++
	ctrl, data, _, _ := mpi.SessionTags(gen)
	announce := proto.AppendFrame(nil, proto.Encode(&proto.Announce{Gen: uint64(gen)}), nil)
	var devs []plugin.Device
	for i := 0; i < n; i++ {
		r := w.ranks.RankAt(i)
		w.Post(r, mpi.TagOpen, announce) // waited for by the session's first frames
		t := w.Link(r, ctrl, data)
		d := engine.NewDevice(t, "mpi", fmt.Sprintf("mpi device (rank %d)", r))
		d.Rank = r
		d.Intro = mpiPeers
		d.Startup = engine.ProcessStartup
		d.OnLost = func(cause error) error {
			w.mu.Lock()
			w.lost[r] = cause
			w.mu.Unlock()
			return fmt.Errorf("MPI rank %d: %w", r, cause)
		}
		d.CloseFn = func(bool) error {
			w.Drop(t)
			return nil
		}
		d.Killer = func() {
			// Stop gave up on the rank's kernel: the rank itself is well
			// and takes the exit at FinishMPI without it (serve), so MPI
			// can still be finalized.
			w.mu.Lock()
			w.killed[r] = d.Name()
			w.mu.Unlock()
		}
		devs = append(devs, d)
	}
	// Each device rank serves what the mpi item's brackets name, which
	// its own GOFFLOAD_DEVICES holds as ours does: rank i of the device
	// ranks its device i (modulo how many it has).
	for i, d := range devs {
		if served == "" {
			break
		}
		if _, _, err := d.(*engine.Device).Serve(i); err != nil {
			for _, d := range devs {
				d.Close()
			}
			return nil, fmt.Errorf("mpi:%s: %w", arg, err)
		}
	}
	return devs, nil
}

// serveMPIIfDevice serves as a device and ends the process on a device rank
// of an MPI job. On the host rank, and outside MPI, it returns.
func serveMPIIfDevice(img *plugin.Image) {
	if !cmpi.Launched() {
		return
	}
	w, err := mpiWorldInit()
	rank, _ := cmpi.LaunchRank()
	if err != nil {
		fmt.Fprintf(os.Stderr, "goffload (MPI rank %s): %v\n", rank, err)
		os.Exit(1)
	}
	if w.IsHost() {
		return
	}
	servingRank.Store(true)
	err = w.serve(img)
	if !errors.Is(err, errUnfinalized) { // else the host does not finalize either
		if ferr := w.finalize(); err == nil && ferr != nil {
			err = ferr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "goffload device (MPI rank %d, pid %d): %v\n", w.Rank(), os.Getpid(), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serve runs a device rank. It runs the sessions the host announces, each on
// its own goroutine, until the host says exit. Then it waits for the sessions
// still running.
func (w *mpiWorld) serve(img *plugin.Image) error {
	if err := engine.CheckTimeout(); err != nil {
		return err
	}
	cores, err := deviceCores()
	if err != nil {
		return err
	}
	pollWhileComputing()
	serves, err := servedOpener(mpiServed(os.Getenv(envServe)), true)
	if err != nil {
		return err
	}
	opens := w.Link(w.ranks.Host, mpi.TagOpen, mpi.TagOpen)
	defer w.ServeRaw()()
	var wg sync.WaitGroup
	for {
		m, err := opens.ReadMsg()
		if err != nil {
			wg.Wait()
			return fmt.Errorf("reading the host's announcements: %w", err)
		}
		if m.Type == proto.TExit {
			x, err := proto.As[proto.Exit](m)
			if err != nil {
				wg.Wait()
				return fmt.Errorf("%w: the host's exit: %v", proto.ErrFrame, err)
			}
			w.endSessions(&wg)
			if x.Unfinalized {
				return errUnfinalized
			}
			return nil
		}
		if m.Type != proto.TAnnounce {
			return fmt.Errorf("%w: %s frame among the host's announcements", proto.ErrFrame, m.Type)
		}
		a, err := proto.As[proto.Announce](m)
		if err != nil || a.Gen > 1<<30 {
			return fmt.Errorf("%w: announcement of session %d: %v", proto.ErrFrame, a.Gen, err)
		}
		ms := &mpiSession{w: w, gen: int(a.Gen)}
		ms.base.Store(-1)
		var ctrl, data int
		ctrl, data, ms.peerCtrl, ms.peerData = mpi.SessionTags(ms.gen)
		t := w.Link(w.ranks.Host, ctrl, data)
		w.Accept(ms.peerCtrl, ms.peerData, ms.accepted)
		ms.s = engine.NewSession(t, img, cores)
		ms.s.Rank = w.Rank()
		ms.s.Kind = "mpi"
		ms.s.Serves = serves
		ms.s.Helloed = func(num int) { ms.base.Store(int64(num - w.ranks.Index(w.Rank()))) }
		ms.s.ConnectPeers(ms.connect)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms.serve(t)
		}()
	}
}

// errUnfinalized is why a device rank exits without finalizing MPI: the
// host said it does not (it lost a rank), and MPI_Finalize would wait for
// the host and the lost rank forever.
var errUnfinalized = errors.New("exiting without MPI_Finalize: the host lost a device rank and does not finalize MPI")

// exitGrace is how long a device rank told to exit waits for its sessions to
// end. After it, the rank exits without them.
const exitGrace = 2 * time.Second

// endSessions waits for the sessions still running when the host said exit,
// for exitGrace at most. The host says it once it has closed every device. So
// a session still running then has a kernel that Stop gave up on (it killed
// the device). The rank exits without it, saying so. It finalizes MPI with
// the host, so that the job ends as the host's program chooses.
func (w *mpiWorld) endSessions(wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(exitGrace):
		fmt.Fprintf(os.Stderr, "goffload device (MPI rank %d, pid %d): exiting with a kernel still running: the host's Stop gave up on it\n", w.Rank(), os.Getpid())
	}
}

// mpiPeers is the MPI devices' engine.Introducer. Ranks reach each other
// themselves (mpiSession.connect), so there is nothing to introduce.
var mpiPeers engine.Introducer = mpiIntro{}

type mpiIntro struct{}

func (mpiIntro) Introduce(a, b *engine.Device) error { return nil }
func (mpiIntro) Forget(*engine.Device)               {}

// mpiSession is a device rank's session with the host.
type mpiSession struct {
	w                  *mpiWorld
	gen                int
	s                  *engine.Session
	base               atomic.Int64 // the number of the first device rank, once the host said hello
	peerCtrl, peerData int
}

func (ms *mpiSession) serve(t *mpi.Link) {
	w := ms.w
	if err := ms.s.Serve(); err != nil {
		fmt.Fprintf(os.Stderr, "goffload device (MPI rank %d): session %d: %v\n", w.Rank(), ms.gen, err)
	}
	for _, pt := range w.Unaccept(ms.peerCtrl) {
		w.Drop(pt)
	}
	w.Drop(t)
}

func (ms *mpiSession) ranks() (mpi.Ranks, error) {
	base := ms.base.Load()
	if base < 0 {
		return mpi.Ranks{}, fmt.Errorf("no device number yet")
	}
	r := ms.w.ranks
	r.Base = int(base)
	return r, nil
}

// connect starts the link to device num of the session.
func (ms *mpiSession) connect(num int) error {
	ranks, err := ms.ranks()
	if err != nil {
		return err
	}
	r, err := ranks.RankOf(num)
	if err != nil {
		return err
	}
	if r == ms.w.Rank() {
		return fmt.Errorf("device %d is this device", num)
	}
	if pt, created := ms.w.PeerLink(r, ms.peerCtrl, ms.peerData); created {
		ms.s.AddPeer(num, pt)
	}
	return nil
}

// accepted starts the link that device rank r began with a frame.
func (ms *mpiSession) accepted(r int, pt *mpi.Link) {
	ranks, err := ms.ranks()
	if err != nil {
		ms.w.Drop(pt)
		return
	}
	ms.s.AddPeer(ranks.NumOf(r), pt)
}

// FinishMPI ends MPI on the host rank of an MPI job. Every device rank is
// told to exit once its sessions end; offload.Stop closes them first. Then
// MPI is finalized, as an MPI program must before it exits. offload.Stop
// calls it. Afterwards, MPI devices cannot be opened again. Elsewhere it does
// nothing.
func FinishMPI() error {
	w := world.w.Load()
	if w == nil || !w.IsHost() || mpiHeld.Load() {
		return nil
	}
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return nil
	}
	w.done = true
	var lost error
	for r, err := range w.lost {
		if _, ok := w.killed[r]; ok {
			continue
		}
		lost = fmt.Errorf("MPI rank %d was lost (%v): MPI_Finalize would wait for it forever, so MPI is not finalized and the launcher may report this rank's exit as a failure", r, err)
	}
	// The device ranks finalize with the host, or, where it does not,
	// exit without (else each would wait for the lost rank in MPI_Finalize).
	var exits []func(<-chan struct{}) error
	exit := proto.AppendFrame(nil, proto.Encode(&proto.Exit{Unfinalized: lost != nil}), nil)
	for r := 0; r < w.ranks.Size; r++ {
		if r != w.ranks.Host {
			exits = append(exits, w.Post(r, mpi.TagOpen, exit))
		}
	}
	killed := make([]int, 0, len(w.killed))
	for r := range w.killed {
		killed = append(killed, r)
	}
	slices.Sort(killed)
	for _, r := range killed {
		// Said here, whatever the program does with Stop's error: the
		// job's end would otherwise not say why a rank's work was cut.
		fmt.Fprintf(os.Stderr, "goffload: Stop: %s was killed: its kernel did not return within GOFFLOAD_STOP_GRACE after Stop asked it to stop; MPI rank %d is told to exit without it\n", w.killed[r], r)
	}
	w.mu.Unlock()
	if lost != nil {
		fmt.Fprintf(os.Stderr, "goffload: Stop: %v\n", lost)
	}
	timeout := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() { close(timeout) })
	defer timer.Stop()
	for _, wait := range exits {
		if err := wait(timeout); err != nil {
			return fmt.Errorf("telling the device ranks to exit: %w", err)
		}
	}
	if lost != nil {
		return lost
	}
	return w.finalize()
}

// mpiHeld makes FinishMPI do nothing (HoldMPIForTests).
var mpiHeld atomic.Bool

// HoldMPIForTests keeps MPI running across offload.Stop until finish is
// called. So the tests of one MPI job can start the runtime on its device
// ranks again and again. finish ends MPI as FinishMPI does.
func HoldMPIForTests() (finish func() error) {
	mpiHeld.Store(true)
	return func() error {
		mpiHeld.Store(false)
		return FinishMPI()
	}
}

// finalize ends MPI, or gives up after a while. MPI_Finalize waits for every
// rank, also one that died where the launcher let the job go on.
func (w *mpiWorld) finalize() error {
	done := make(chan error, 1)
	go func() { done <- w.Finalize() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		return fmt.Errorf("MPI_Finalize did not return within 10s (is a rank lost?)")
	}
}

// mpiServed is what a device rank serves. It is the brackets of the mpi item
// of the job's GOFFLOAD_DEVICES (mpi[opencl], mpi:2[cuda]), which every rank
// has alike. It is empty (its CPUs) where there are none.
func mpiServed(devices string) string {
	for _, item := range strings.Split(devices, ",") {
		item = strings.TrimSpace(item)
		if len(item) < 3 || !strings.EqualFold(item[:3], "mpi") {
			continue
		}
		if _, spec, err := splitServed("mpi", item[3:]); err == nil {
			return spec
		}
	}
	return ""
}
