package cholesky

// Owners is a hand placement of the factorization's tiles: tile (i, j),
// j ≤ i, lives on device owner(i, j) (an index into FactorOn's devices),
// where the tasks that write it run.
type Owners func(i, j int) int

// ByRows deals the t rows of tiles out to devices of relative speeds
// speeds (one per device, positive) so that each
// is expected to end its rows at about the same time: row i holds i trsm,
// i syrk and i(i-1)/2 gemm tasks (a gemm is twice a trsm's or syrk's
// flops), and the rows go, heaviest first, to the device whose work so far
// with the row's, divided by its speed, is the least. With equal speeds
// it is Factor's placement; with the devices' speeds, the best placement
// by rows a program that knows them can make.
func ByRows(t int, speeds []float64) Owners {
	rows := rowOwners(t, speeds)
	return func(i, _ int) int { return rows[i] }
}

// rowOwners is ByRows's owner of each row.
func rowOwners(t int, speeds []float64) []int {
	owner := make([]int, t)
	load := make([]float64, len(speeds))
	for i := t - 1; i >= 0; i-- {
		w := float64(2*i + i*(i-1) + 1)
		d := 0
		for k := range load {
			if (load[k]+w)/speeds[k] < (load[d]+w)/speeds[d] {
				d = k
			}
		}
		owner[i] = d
		load[d] += w
	}
	return owner
}

// Equal is the speeds of n devices equally fast, for ByRows.
func Equal(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// RoundRobin deals the tiles out to n devices in turn, row by row (tile
// (i, j) is the (i(i+1)/2 + j)-th): the placement that takes no account of
// the devices' speeds nor of the tiles' work, each device owning every
// n-th tile.
func RoundRobin(n int) Owners {
	return func(i, j int) int { return (i*(i+1)/2 + j) % n }
}
