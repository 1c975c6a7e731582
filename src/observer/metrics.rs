//! Observation's metrics (`memgate_observer_…`). Labels take fixed values (gates, verdicts,
//! outcomes), except `tenant` on the usage counters: tenants are what an operator creates.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabels {
    pub gate: String,
    pub verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    pub tenant: String,
}

#[derive(Clone, Debug, Default)]
pub struct ObserverMetrics {
    /// Exchanges written to the queue.
    pub queued: Counter,
    /// Exchanges not queued, by why (`backlog`, `tenant_full`, `store`).
    pub not_queued: Family<OutcomeLabels, Counter>,
    /// Extraction calls by outcome (`ok`, `rate_limited`, `overloaded`, `upstream_error`,
    /// `unreachable`, `refused`, `unreadable`), and exchanges put off by the budget (`budget`).
    pub calls: Family<OutcomeLabels, Counter>,
    /// Candidates by the gate that decided them and the verdict.
    pub candidates: Family<GateLabels, Counter>,
    /// Claimed exchanges that stopped writing because their claim was gone: their scope was
    /// forgotten during the extraction (or another replica took them over).
    pub fenced: Counter,
    /// Extraction calls made, per tenant: the cost's first half.
    pub tenant_calls: Family<TenantLabels, Counter>,
    pub tenant_input_tokens: Family<TenantLabels, Counter>,
    pub tenant_output_tokens: Family<TenantLabels, Counter>,
}

impl ObserverMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "observer_exchanges_queued",
            "Finished exchanges queued for extraction",
            self.queued.clone(),
        );
        registry.register(
            "observer_exchanges_not_queued",
            "Finished exchanges that were not queued, by reason",
            self.not_queued.clone(),
        );
        registry.register("observer_extraction_calls", "Extraction calls by outcome", self.calls.clone());
        registry.register(
            "observer_candidates",
            "Extracted candidates by the gate that decided them and the verdict",
            self.candidates.clone(),
        );
        registry.register(
            "observer_exchanges_fenced",
            "Claimed exchanges that wrote nothing more because their claim was gone (their scope forgotten meanwhile)",
            self.fenced.clone(),
        );
        registry.register("observer_tenant_calls", "Extraction calls per tenant", self.tenant_calls.clone());
        registry.register(
            "observer_tenant_input_tokens",
            "Extraction input tokens per tenant",
            self.tenant_input_tokens.clone(),
        );
        registry.register(
            "observer_tenant_output_tokens",
            "Extraction output tokens per tenant",
            self.tenant_output_tokens.clone(),
        );
    }

    pub fn call(&self, outcome: &str) {
        self.calls.get_or_create(&OutcomeLabels { outcome: outcome.to_owned() }).inc();
    }

    pub fn candidate(&self, gate: &str, verdict: &str) {
        self.candidates
            .get_or_create(&GateLabels { gate: gate.to_owned(), verdict: verdict.to_owned() })
            .inc();
    }

    pub fn not_queued(&self, why: &str) {
        self.not_queued.get_or_create(&OutcomeLabels { outcome: why.to_owned() }).inc();
    }

    pub fn usage(&self, tenant: &str, input_tokens: u64, output_tokens: u64) {
        let labels = TenantLabels { tenant: tenant.to_owned() };
        self.tenant_calls.get_or_create(&labels).inc();
        self.tenant_input_tokens.get_or_create(&labels).inc_by(input_tokens);
        self.tenant_output_tokens.get_or_create(&labels).inc_by(output_tokens);
    }
}
