"""launcher-capi: turns Planned NodeClaims into Cluster API Machines and publishes the MachineDeployment catalog."""
