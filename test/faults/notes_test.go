//go:build faults

package faults

// docNotes follows the table in docs/RELIABILITY.md.
const docNotes = `
## How each scenario is run

TODO
`
