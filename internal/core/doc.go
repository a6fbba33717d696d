// Package core is goffload's device-agnostic runtime. It holds the
// configuration and the device table. It lowers target constructs and
// tasks to plugin queue operations, issuing what each device's present
// table (package mapping) plans.
package core
