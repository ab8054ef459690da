#ifndef TITAN_LIB_DISTRIBUTED_DUMP_SIGNAL_H_
#define TITAN_LIB_DISTRIBUTED_DUMP_SIGNAL_H_

namespace titan {

// SIGUSR1 asks for a collective flight recorder dump (lib/distributed/comm_trace.h), and the
// launcher forwards it to every rank whenever a user sends it. Where no recorder answers it
// (start-up, shutdown) its default action would end the process: this installs a handler that
// writes one line on stderr and does nothing else. Every process that links this library gets it
// before its shared libraries' initialisers run (see dump_signal.cc); CommTrace restores it.
void IgnoreDumpRequests();
// The same for a process that runs alone: it issues no collectives, so its line says there is
// nothing to dump.
void IgnoreDumpRequestsAlone();

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_DUMP_SIGNAL_H_
