// Package bypass is capgate's differential bypass suite: real Django, Django
// REST framework and gunicorn (Debian's packages) behind `capgate serve`,
// attacked through the gateway. The upstream (test/bypass/upstream) records
// every heavy call it runs; the tests assert that it never ran one beyond a
// user's limit, never ran one capgate did not count, and that no caller
// became staff. TestDifferentialFuzz mutates heavy requests rather than
// listing them. The gateways wait (wait.max_seconds 2) unless
// CAPGATE_BYPASS_WAIT=off. Without the Debian packages the tests skip, or
// fail when CAPGATE_REQUIRE_BYPASS=1. docs/SECURITY.md maps each attack to
// its test.
package bypass
