// A rank's lookup in steps (harness/lookup_steps.h): the rank of DP replica
// i is instance i. It keeps a RequestHasher per table and runs the
// operations on its instance (begin, extend, verify, commit, release); CP
// prefill chunks it hashes with its CP group's halos (core/lookup/cp_halo.h)
// when its replica is in the request's CP group. Every step with tokens is
// one lookup round on every rank (those without tokens pass none, with the
// same DP slot), each rank's ids checked against the accepted sequence
// hashed whole and its lookups against the reference (RankLookups).
#pragma once

#include "core/backend/collectives.h"
#include "core/deployment/cp_groups.h"
#include "harness/lookup_steps.h"
#include "harness/scenario_rank.h"
#include "harness/scenario_rank_lookup.h"

namespace engram::harness {

// cp_group: this rank's CP group (null when no operation is a CP prefill).
Status run_lookup_steps(const CompiledSteps& steps, const ScenarioRankInputs& inputs, int world_rank,
                        Collectives* cp_group, const CpGroup& cp, RankLookups& lookups);

}  // namespace engram::harness
