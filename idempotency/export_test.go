package idempotency

// JoinersWaiting returns the repeats waiting for a call they joined, in
// all and of user.
func (rep *Repeater) JoinersWaiting(user string) (total, ofUser int) {
	return rep.joins.waiting(user)
}
