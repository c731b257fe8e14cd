#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct UmamiSiteCreated {
    pub site: String,
    pub owner: String,
}

impl mesh::Event for UmamiSiteCreated {
    const KEY: &'static str = "module.umami.site.created";
    const SCHEMA: u32 = 1;
}
