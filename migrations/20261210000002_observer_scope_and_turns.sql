-- Observation writes into the caller's own write scope (`Caller::own_scope`, where memgate's
-- write tools write), decided when the exchange is queued and kept with it; each outcome keeps
-- it too, so that `forget` of that scope finds both. Rows queued before this wrote into
-- `user:<subject>`.
ALTER TABLE observer_exchanges ADD COLUMN scope TEXT;
UPDATE observer_exchanges SET scope = 'user:' || subject;
CREATE INDEX observer_exchanges_by_scope ON observer_exchanges (tenant, scope);
ALTER TABLE observer_outcomes ADD COLUMN scope TEXT;
UPDATE observer_outcomes SET scope = 'user:' || subject;
CREATE INDEX observer_outcomes_by_scope ON observer_outcomes (tenant, scope);

-- Claims take tenants in turn (`Store::observer_claim`): `turn` is the number of the claim that
-- last took one of the tenant's exchanges, the lowest goes first. One row per tenant that has
-- queued anything; pruned with the tenant's last exchange.
CREATE TABLE observer_turns (
    tenant          TEXT    NOT NULL PRIMARY KEY,
    turn            BIGINT  NOT NULL
);
