//! What runs on a formed cluster: the script run before each elastic
//! restart (`elastic.prepare_data_script`), the idle guard (`idle`), and
//! how long the nodes' logs are kept (`logs.retention_days`).

use super::{At, Checker, ticked};
use crate::spec::{DEFAULT_LOG_RETENTION_DAYS, LOG_RETENTION_DAYS};
use node_contract::idle::{Idle, IdleAction};

impl Checker<'_> {
    pub(super) fn prepare_data_script(&mut self, script: Option<String>) -> Option<String> {
        let s = script?;
        let problem = if !s.starts_with('/') {
            Some("is not an absolute path")
        } else if s.contains("${") {
            Some("contains `${`, which would be read as a CloudFormation substitution")
        } else if s.chars().any(char::is_control) {
            Some("contains a control character")
        } else {
            None
        };
        if let Some(problem) = problem {
            self.error(
                "elastic.prepare_data_script",
                At::Value,
                format!("{} {problem}", ticked(&s.escape_debug().to_string())),
                "write an absolute path that every node can read, usually on EFS, for example `/efs/prepare-data.sh`",
            );
        }
        Some(s)
    }

    /// The idle guard's settings: `after_minutes` is required, the action
    /// defaults to `scale_workers`.
    pub(super) fn idle(&mut self, written: super::super::model::Idle) -> Option<Idle> {
        let minutes = self.required("idle", "after_minutes", written.after_minutes);
        let (min, max) = (node_contract::idle::MIN_MINUTES, node_contract::idle::MAX_MINUTES);
        if let Some(m) = minutes
            && !(min..=max).contains(&m)
        {
            self.error(
                "idle.after_minutes",
                At::Value,
                format!("{m} minutes is outside the allowed {min} to {max}"),
                "a job needs a few minutes to start, and a week is the longest wait; for example 30",
            );
        }
        let name = written.action.as_deref().unwrap_or("scale_workers");
        let action = IdleAction::from_name(name).or_else(|| {
            self.error(
                "idle.action",
                At::Value,
                format!("{} is not an idle action", ticked(&name.escape_debug().to_string())),
                format!("write one of {}", IdleAction::NAMES.map(|n| format!("`{n}`")).join(", ")),
            );
            None
        });
        Some(Idle { after_minutes: minutes?, action: action? })
    }

    pub(super) fn log_retention(&mut self, written: Option<u32>) -> u32 {
        let days = written.unwrap_or(DEFAULT_LOG_RETENTION_DAYS);
        if !LOG_RETENTION_DAYS.contains(&days) {
            let allowed: Vec<String> = LOG_RETENTION_DAYS.iter().map(u32::to_string).collect();
            self.error(
                "logs.retention_days",
                At::Value,
                format!("{days} days is not a retention CloudWatch Logs allows"),
                format!("use one of {} (the default is {DEFAULT_LOG_RETENTION_DAYS})", allowed.join(", ")),
            );
        }
        days
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::checked;
    use crate::spec::DEFAULT_LOG_RETENTION_DAYS;

    #[test]
    fn log_retention_is_one_cloudwatch_allows() {
        let text = "logs:\n  retention_days: 10\n";
        let mut days = 0;
        let d = checked(text, |c| days = c.log_retention(Some(10)));
        assert_eq!(days, 10);
        let [e] = &d[..] else { panic!("{d:?}") };
        assert!(e.message.contains("10 days is not a retention CloudWatch Logs allows"), "{}", e.message);
        let help = e.help.as_deref().unwrap_or_default();
        assert!(help.contains("1, 3, 5, 7, 14, 30") && help.contains("3653"), "{help}");
        assert_eq!((e.line, e.column), (2, 19));
        assert!(checked(text, |c| assert_eq!(c.log_retention(None), DEFAULT_LOG_RETENTION_DAYS)).is_empty());
        assert!(checked(text, |c| assert_eq!(c.log_retention(Some(3653)), 3653)).is_empty());
    }
}
