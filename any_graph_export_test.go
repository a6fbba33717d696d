package offload

// TaskgraphRecords is how many times tg was recorded.
func TaskgraphRecords(tg *Taskgraph) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.records
}
